"""The harness every run and sweep goes through: device, guards, monitor, policy, trainer."""
