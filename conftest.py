"""The machinery every pytest run here uses: the snippet runner and the suite's scheduler (both in guidekit/)."""

pytest_plugins = ["guidekit.runner", "guidekit.schedule", "guidekit.changed", "pytester"]  # pytester: tests/machinery/test_runner.py
