"""The workload: model zoo, GLUE tasks and metrics, the fine-tuning loop, step traces."""
