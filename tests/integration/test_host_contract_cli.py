"""A host that lacks part of the contract is refused by the command, by name, before any work."""

import json
import os
import subprocess

from helpers import child_env, signoff_cmd, state_tables

from signoff.app import Signoff

HALF_HOST = '''
class Half:
    """Answers the grant, and nothing else of the contract."""

    def __init__(self, home):
        pass

    def context(self):
        return {"tenant": "t", "user": "u", "docs": ["doc-demo"], "actions": ["read", "draft"],
                "revision": 1}
'''


def test_a_command_on_a_host_without_the_required_calls_says_bad_config_naming_them(
        home, tmp_path):
    Signoff.init(home).close()
    (tmp_path / "halfhost.py").write_text(HALF_HOST, encoding="utf-8")
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "signoff.hosts.reference:ReferenceHost", "halfhost:Half"), encoding="utf-8")
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    done = subprocess.run(signoff_cmd(home, "monitor", "bind", "--document", "doc-demo", "--json"),
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["error"] == "bad_config"
    assert "halfhost:Half" in answer["message"]
    assert "get, read_material, submit, receipt" in answer["message"]
    assert "Traceback" not in done.stderr
    with Signoff(home) as rt:
        assert state_tables(rt)["monitor"] == []  # nothing bound
