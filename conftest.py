"""The machinery every pytest run here uses: the snippet runner, the suite's scheduler and the per-change lane (all in
guidekit/)."""

pytest_plugins = [
    "guidekit.runner",
    "guidekit.schedule",
    "guidekit.changed",
    "pytester",  # tests/machinery/test_runner.py, test_changed.py
]
