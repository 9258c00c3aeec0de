"""The soak's record (guidekit/soak.py): runs count towards a program while what decides its run is unchanged, so a
soak stopped in one session is taken up in the next; a changed program starts again from zero."""

import json

from guidekit import soak


def plant(root):
    files = {
        "snippets/x/_helper.py": "VALUE = 1\n",
        "snippets/x/prog.py": '"""Prints one."""\nfrom _helper import VALUE\n\nprint(VALUE)\n',
        "snippets/x/other.py": '"""Prints two."""\nprint(2)\n',
        "recordings/cpu/x/prog.txt": "1\n",
        "recordings/cuda-2/x/prog.txt": "1\n",
        "guidekit/runner.py": "# the runner\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")


def test_fingerprint_follows_the_program_its_siblings_recordings_and_the_runner(tmp_path):
    plant(tmp_path)
    first = soak.fingerprint("snippets/x/prog.py", tmp_path)
    assert first == soak.fingerprint("snippets/x/prog.py", tmp_path)
    seen = {first}
    for path in [
        "snippets/x/_helper.py",
        "recordings/cpu/x/prog.txt",
        "recordings/cuda-2/x/prog.txt",
        "guidekit/runner.py",
        "snippets/x/prog.py",
    ]:
        (tmp_path / path).write_text((tmp_path / path).read_text() + "# changed\n", encoding="utf-8")
        now = soak.fingerprint("snippets/x/prog.py", tmp_path)
        assert now not in seen, f"a change to {path} left the fingerprint as it was"
        seen.add(now)
    other = soak.fingerprint("snippets/x/other.py", tmp_path)
    (tmp_path / "snippets/x/_helper.py").write_text("VALUE = 3\n", encoding="utf-8")
    assert soak.fingerprint("snippets/x/other.py", tmp_path) == other, "other.py does not import the helper"


def test_runs_add_up_across_soaks_until_a_program_changes(tmp_path):
    prints = {"a.py": "1", "b.py": "1"}
    record = soak.load(tmp_path / "none.json", "2.15.0")
    assert soak.runs_at_current_content(record, prints) == 0
    for _ in range(3):
        assert soak.tally(record, {"a.py": "passed", "b.py": "passed"}, prints) == []
    out = tmp_path / "record.json"
    out.write_text(json.dumps(record), encoding="utf-8")
    again = soak.load(out, "2.15.0")  # another session takes it up
    assert soak.runs_at_current_content(again, prints) == 3
    prints["b.py"] = "2"  # b.py changed since
    assert soak.runs_at_current_content(again, prints) == 0
    assert soak.tally(again, {"a.py": "passed", "b.py": "failed"}, prints) == ["b.py"]
    assert again["programs"]["a.py"] == {"fingerprint": "1", "passed": 4, "failed": 0, "skipped": 0}
    assert again["programs"]["b.py"] == {"fingerprint": "2", "passed": 0, "failed": 1, "skipped": 0}
    assert soak.runs_at_current_content(again, prints) == 1
    prints["c.py"] = "1"  # a new program has no runs yet
    assert soak.runs_at_current_content(again, prints) == 0


def test_a_record_of_another_torch_or_of_the_old_kind_is_not_added_to(tmp_path):
    out = tmp_path / "record.json"
    out.write_text(json.dumps({"torch": "2.14.1", "runs": [{}], "programs": {"a.py": {}}}), encoding="utf-8")
    assert soak.load(out, "2.15.0") == {"torch": "2.15.0", "runs": [], "programs": {}}
    out.write_text(json.dumps({"torch": "2.15.0", "runs": 7, "failures": {}}), encoding="utf-8")  # totals only
    assert soak.load(out, "2.15.0")["programs"] == {}
