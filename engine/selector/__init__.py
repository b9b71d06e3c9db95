"""The ML selector: predicts the energy-optimal DVFS setting for a new fine-tuning workload.

    features     workload and setting -> one row of numbers (the feature schema)
    dataset      training rows from the store's sweeps, or twin sweeps of the model zoo
    candidates   scikit-learn pipelines (ridge, kNN, SVR, forests, boosting, MLP, a classifier)
    selection    leave-workloads-out cross-validation ranked by the regret of the choices
    selector     the trained Selector: predict, choose (with optional probes)
    probes       probe planning and the per-workload correction
    mixing       measured and twin data together: measured rows weighted, CV graded on them
    transfer     a trained selector adapted with a few measured sweeps (a residual correction)
    basis        what a selector's choices rest on (recorded in its metadata, printed by select)
    persistence  joblib + JSON sidecar, verified before unpickling
    policy       the `ml` policy of `slm-dvfs run`

`policy_factory()` is every policy a client may run, `ml` included (engine.dvfs.policies's
factory with its plug point filled); nothing is registered on import. scikit-learn is imported
only when a selector is trained or loaded.
"""

from __future__ import annotations

from engine.selector.policy import MLPolicy, ml_factory, policy_factory

__all__ = ["MLPolicy", "ml_factory", "policy_factory"]
