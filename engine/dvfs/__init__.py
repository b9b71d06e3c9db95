"""DVFS: the setting space, the objectives that rank settings, the policies that choose
them, and the controller that applies them at step boundaries."""

from engine.dvfs.controller import DvfsController
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective, module_power_limit_w, parse_objective
from engine.dvfs.online import OnlinePolicy
from engine.dvfs.policies import BUILTIN_POLICIES, Policy, PolicyContext, PolicyFactory, make_policy
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting, check_setting
from engine.dvfs.space import setting_space

__all__ = [
    "BUILTIN_POLICIES",
    "MAXN",
    "MAXN_PINNED",
    "DvfsController",
    "DvfsSetting",
    "Measurement",
    "Objective",
    "OnlinePolicy",
    "Policy",
    "PolicyContext",
    "PolicyFactory",
    "check_setting",
    "make_policy",
    "module_power_limit_w",
    "parse_objective",
    "setting_space",
]
