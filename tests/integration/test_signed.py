"""Signed approvals (docs/approvals.md, "Signed approvals"): reviewer keys, statements,
and the refusals of a decision whose signature does not hold.

Python API and CLI on a real home (SQLite by default; PostgreSQL/Redis with the
``SIGNOFF_TEST_*`` variables), on the fake clock; processing is synchronous.
"""

import json
import stat

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers import make_event, read_here, ready_task, refusal

from signoff.app import Signoff
from signoff.cli import main
from signoff.decisions.signing import Proof
from signoff.models import Approval, Audit, MODELS, StatementNonce, Task
from signoff.rules.statements import b64url, canonical_text
from signoff.storage import homekey


def new_key():
    """An Ed25519 key pair: ``(private key, its PEM PKCS#8, its public PEM)``."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, private, public


def sign(key, minted):
    return b64url(key.sign(minted["canonical"].encode("utf-8")))


@pytest.fixture
def signed(rt):
    """Monitor ``s`` (two signed approvals needed); reviewers ana and bo, with a key each."""
    rt.bind("doc-demo", "s", approvals=2, signed_approvals=True)
    people = {}
    for name in ("ana", "bo"):
        rt.add_reviewer(name)
        key, _, public = new_key()
        people[name] = (key, rt.add_reviewer_key(name, public)["key_id"])
    return rt, people


def approve_signed(rt, people, name, key, digest, minted=None):
    private, key_id = people[name]
    minted = minted or rt.statement(key, name)
    return rt.approve(key, digest, by=name, channel="api",
                      proof=Proof(minted["statement"], "approve", sign(private, minted), key_id))


def counted(rt):
    return {m.__name__: m.select().count() for m in MODELS if m is not StatementNonce}


def test_two_reviewers_signing_complete_the_quorum_and_the_task_is_done(signed, host):
    rt, people = signed
    key, digest = ready_task(rt, "s")
    first = approve_signed(rt, people, "ana", key, digest)
    assert (first["status"], first["approvals_missing"]) == ("ready", 1)
    assert approve_signed(rt, people, "bo", key, digest)["status"] == "approved"
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    rows = list(Approval.select().where(Approval.task_key == key).order_by(Approval.id))
    assert [r.by for r in rows] == ["ana", "bo"]
    for row, name in zip(rows, ("ana", "bo")):
        statement = json.loads(row.statement)
        assert (statement["reviewer"], statement["digest"], statement["decision"]) == (
            name, digest, "approve")
        assert canonical_text(statement) == row.statement
        assert row.signature["key_id"] == people[name][1]
    entries = [a for a in Audit.select().where(Audit.task_key == key,
                                               Audit.code.in_(["approval_added", "approved"]))]
    assert [(a.code, a.actor, a.data["key_id"]) for a in entries] == [
        ("approval_added", "ana", people["ana"][1]), ("approved", "bo", people["bo"][1])]
    assert all(a.data["digest"] == digest and a.data["signature"] for a in entries)
    assert {r.used_at is not None for r in StatementNonce.select()} == {True}
    shown = rt.task(key)["approvals"]
    assert [a["signature"]["key_id"] for a in shown] == [people["ana"][1], people["bo"][1]]
    assert shown[0]["statement"] == rows[0].statement


def test_each_bad_signature_is_refused_with_its_code_and_nothing_is_recorded(signed, clock):
    rt, people = signed
    key, digest = ready_task(rt, "s")
    private, key_id = people["ana"]
    before = counted(rt)
    assert refusal(rt.approve, key, digest, by="ana", channel="api") == "signature_required"
    minted = rt.statement(key, "ana")
    wrong = Ed25519PrivateKey.generate()
    cases = {
        "bad_signature": Proof(minted["statement"], "approve", sign(wrong, minted), key_id),
        "unknown_key": Proof(minted["statement"], "approve", sign(private, minted), people["bo"][1]),
        "statement_mismatch": Proof(dict(minted["statement"], digest="0" * 64), "approve",
                                    sign(private, minted), key_id),
        "nonce_invalid": Proof(dict(minted["statement"], nonce="made-up"), "approve",
                               b64url(private.sign(canonical_text(dict(
                                   minted["statement"], nonce="made-up")).encode())), key_id),
    }
    for code, proof in cases.items():
        assert refusal(rt.approve, key, digest, by="ana", channel="api", proof=proof) == code
    # Bo's key is bo's: the statement names ana, so it is no key of hers.
    assert counted(rt) == before
    clock.advance(301)
    assert refusal(rt.approve, key, digest, by="ana", channel="api",
                   proof=Proof(minted["statement"], "approve", sign(private, minted), key_id)
                   ) == "nonce_expired"
    assert counted(rt) == before and rt.task(key)["status"] == "ready"
    assert StatementNonce.get_by_id(minted["statement"]["nonce"]).used_at is None
    # A day on, the next statement ana fetches drops the old nonces: a late one is unknown.
    clock.advance(24 * 3600)
    rt.statement(key, "ana")
    assert StatementNonce.get_or_none(StatementNonce.nonce == minted["statement"]["nonce"]) is None


def test_a_counted_statement_never_counts_again_even_after_an_edit_restarts_the_quorum(signed):
    rt, people = signed
    key, digest = ready_task(rt, "s")
    minted = rt.statement(key, "ana")
    assert approve_signed(rt, people, "ana", key, digest, minted)["approvals_missing"] == 1
    before = counted(rt)
    assert refusal(approve_signed, rt, people, "ana", key, digest, minted) in ("nonce_used",)
    assert counted(rt) == before
    # Bo edits (signed): the quorum starts again with bo's approval of the edited digest.
    edit = "Suggested demo date for doc-demo: 2026-11-02"
    minted_edit = rt.statement(key, "bo", "edit", edit=edit)
    private, key_id = people["bo"]
    answer = rt.approve(key, digest, by="bo", channel="api", edit=edit, proof=Proof(
        minted_edit["statement"], "edit", sign(private, minted_edit), key_id))
    assert answer["approvals_missing"] == 1 and answer["digest"] == minted_edit["statement"]["digest"]
    # Ana's first statement names the drafted digest: it cannot count for the edited one,
    # and redrafting back to the drafted digest does not make it count again either.
    rt.redraft(key, by="ops")
    fresh = rt.task(key)
    assert fresh["digest"] == digest
    assert refusal(approve_signed, rt, people, "ana", key, digest, minted) == "nonce_used"


def test_a_signed_reject_keeps_its_proof_and_an_unsigned_one_is_refused(signed):
    rt, people = signed
    key, digest = ready_task(rt, "s")
    assert refusal(rt.reject, key, "no", by="ana", channel="api") == "signature_required"
    minted = rt.statement(key, "ana", "reject")
    private, key_id = people["ana"]
    proof = Proof(minted["statement"], "reject", sign(private, minted), key_id)
    assert rt.reject(key, "no", by="ana", channel="api", proof=proof)["status"] == "rejected"
    task = Task.get_by_id(key)
    assert task.reject_proof == {"statement": minted["canonical"], "signature": proof.signature,
                                 "key_id": key_id}
    assert rt.task(key)["reject_proof"] == task.reject_proof
    [row] = Audit.select().where(Audit.task_key == key, Audit.code == "rejected")
    assert row.data["statement"] == minted["canonical"]


def test_policies_cannot_approve_on_a_signed_monitor(signed):
    rt, _ = signed
    assert refusal(rt.add_policy, "s") == "signed_approvals"
    rt.add_policy("default")
    assert refusal(rt.set_signed_approvals, "default", True) == "policy_active"
    assert rt.set_signed_approvals("s", False)["signed_approvals"] is False
    assert rt.add_policy("s")["monitor"] == "s"
    codes = [(a.code, a.data) for a in Audit.select().where(
        Audit.code == "monitor_signed_approvals").order_by(Audit.seq)]
    assert codes == [("monitor_signed_approvals", {"signed_approvals": True}),
                     ("monitor_signed_approvals", {"signed_approvals": False})]


def test_reviewer_keys_are_added_listed_removed_and_audited(rt, tmp_path):
    rt.add_reviewer("ana")
    key, _, public = new_key()
    ssh = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                        serialization.PublicFormat.OpenSSH)
    added = rt.add_reviewer_key("ana", public)
    assert refusal(rt.add_reviewer_key, "ana", ssh + b" ana@laptop\n") == "key_exists"
    assert refusal(rt.add_reviewer_key, "nobody", new_key()[2]) == "unknown_reviewer"
    assert refusal(rt.add_reviewer_key, "ana", b"not a key") == "invalid_key"
    other = rt.add_reviewer_key("ana", new_key()[0].public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    assert {k["key_id"] for k in rt.reviewer_keys("ana")} == {added["key_id"], other["key_id"]}
    assert rt.reviewer_keys() == rt.reviewer_keys("ana")
    assert added["fingerprint"].startswith("SHA256:") and len(added["fingerprint"]) == 71
    rt.remove_reviewer_key("ana", added["key_id"], by="ops")
    assert refusal(rt.remove_reviewer_key, "ana", added["key_id"]) == "unknown_key"
    rows = [(a.code, a.subject, a.data["key_id"]) for a in Audit.select().where(
        Audit.code.startswith("reviewer_key")).order_by(Audit.seq)]
    assert rows == [("reviewer_key_added", "ana", added["key_id"]),
                    ("reviewer_key_added", "ana", other["key_id"]),
                    ("reviewer_key_removed", "ana", added["key_id"])]
    first = Audit.get(Audit.code == "reviewer_key_added")
    assert first.data["kind"] == "ed25519" and first.data["fingerprint"] == added["fingerprint"]


def test_init_makes_a_private_home_key_and_a_later_init_keeps_it(home, clock):
    Signoff.init(home, clock=clock).close()
    path = home / "home_key.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_bytes()
    rt = Signoff.init(home, clock=clock)
    try:
        assert path.read_bytes() == first
        public = homekey.load_home_key(rt.config).public_key()
        assert len(homekey.home_id(public)) == 32 and homekey.fingerprint(public).startswith(
            "SHA256:" + homekey.home_id(public))
    finally:
        rt.close()


# -- the command line ---------------------------------------------------------------

def cli(home, *args, code=0):
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture
def cli_home(tmp_path, backend):
    """A home on the real clock (the CLI's): monitor ``s`` needs two signed approvals;
    reviewers ana and cy hold keys (cy's in files ``cy.pem`` / ``cy.pub``)."""
    path = tmp_path / "home"
    if backend is not None:
        backend.write_config(path)
    app = Signoff.init(path)
    app.host().put_record("comment-1", document="doc-demo", text="please add the demo date")
    app.host().put_material("doc-demo", "2026-11-01")
    app.close()
    cli(path, "monitor", "bind", "--id", "s", "--document", "doc-demo", "--approvals", "2",
        "--window", "3600", "--signed-approvals")
    _, private_pem, public_pem = new_key()
    (tmp_path / "cy.pem").write_bytes(private_pem)
    (tmp_path / "cy.pub").write_bytes(public_pem)
    app = Signoff(path)
    try:
        app.add_reviewer("ana")
        private, _, public = new_key()
        people = {"ana": (private, app.add_reviewer_key("ana", public)["key_id"])}
        [line] = app.enqueue_events([make_event(occurred=int(app.clock.now()))], monitor_id="s")
        assert line.accepted, line.reason
        app.run_until_idle()
        [task] = app.tasks()
    finally:
        app.close()
    return path, task["key"], task["digest"], people


def test_the_cli_signs_with_a_key_file_and_counts_as_the_reviewer(cli_home, tmp_path):
    home, key, digest, people = cli_home
    cli(home, "reviewer", "add", "cy")
    added = json.loads(cli(home, "reviewer", "key", "add", "cy", "--public-key",
                           str(tmp_path / "cy.pub"), "--json"))
    assert sorted(added) == ["fingerprint", "key_id", "reviewer"] and added["reviewer"] == "cy"
    # Unsigned, as another reviewer's key, or half the options: refused, nothing recorded.
    assert "signature_required" in cli(home, "approve", key, "--digest", digest, code=1)
    assert "unknown_key" in cli(home, "approve", key, "--digest", digest, "--sign-with",
                                str(tmp_path / "cy.pem"), "--as", "ana", code=1)
    assert "--as" in cli(home, "approve", key, "--digest", digest, "--sign-with",
                         str(tmp_path / "cy.pem"), code=2)
    rt = read_here(Signoff(home))
    try:
        assert Approval.select().where(Approval.task_key == key).count() == 0
        answer = json.loads(cli(home, "approve", key, "--digest", digest, "--sign-with",
                                str(tmp_path / "cy.pem"), "--as", "cy", "--json"))
        assert (answer["status"], answer["approvals_missing"]) == ("ready", 1)
        [row] = Approval.select().where(Approval.task_key == key)
        assert (row.by, row.channel, row.signature["key_id"]) == ("cy", "cli", added["key_id"])
        approve_signed(rt, people, "ana", key, digest)
        rt.run_until_idle()
        assert rt.task(key)["status"] == "done"
    finally:
        rt.close()


def test_monitor_bind_and_set_turn_signed_approvals_on_and_off(cli_home):
    home = cli_home[0]
    assert "signed_approvals" in cli(home, "policy", "add", "--monitor", "s", code=1)
    off = json.loads(cli(home, "monitor", "set", "s", "--no-signed-approvals", "--json"))
    assert off["signed_approvals"] is False
    assert "unknown_monitor" in cli(home, "monitor", "set", "nope", "--signed-approvals", code=1)


def test_the_cli_signs_a_reject_and_a_removed_key_signs_nothing(cli_home, tmp_path):
    home, key, digest, _ = cli_home
    cli(home, "reviewer", "add", "cy")
    key_id = json.loads(cli(home, "reviewer", "key", "add", "cy", "--public-key",
                            str(tmp_path / "cy.pub"), "--json"))["key_id"]
    signing = ("--sign-with", str(tmp_path / "cy.pem"), "--as", "cy")
    assert "digest_mismatch" in cli(home, "reject", key, "--digest", "0" * 64, *signing, code=1)
    assert "--digest" in cli(home, "reject", key, *signing, code=2)
    cli(home, "reviewer", "key", "remove", "cy", key_id)
    assert "unknown_key" in cli(home, "reject", key, "--digest", digest, *signing, code=1)
    cli(home, "reviewer", "key", "add", "cy", "--public-key", str(tmp_path / "cy.pub"))
    answer = json.loads(cli(home, "reject", key, "--digest", digest, "--reason", "not now",
                            *signing, "--json"))
    assert answer["status"] == "rejected"
    shown = json.loads(cli(home, "tasks", "show", key, "--json"))
    assert shown["rejected_by"] == "cy" and json.loads(
        shown["reject_proof"]["statement"])["decision"] == "reject"


def test_the_home_key_can_live_where_the_config_says(home, clock, tmp_path):
    Signoff.init(home, clock=clock).close()
    elsewhere = tmp_path / "keys" / "signoff.pem"
    elsewhere.parent.mkdir()
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "[audit]\n", f'[audit]\nhome_key = "{elsewhere}"\n'), encoding="utf-8")
    rt = Signoff.init(home, clock=clock)
    try:
        assert homekey.key_path(rt.config) == elsewhere
        assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o600
        assert homekey.load_home_key(home).public_key() == homekey.load_home_key(
            rt.config).public_key()  # the folder's config names the key
        in_home = serialization.load_pem_private_key((home / "home_key.pem").read_bytes(), None)
        assert homekey.public_raw(in_home) != homekey.public_raw(homekey.load_home_key(rt.config))
    finally:
        rt.close()
    (home / "signoff.toml").write_text((home / "signoff.toml").read_text().replace(
        str(elsewhere), ""), encoding="utf-8")
    with pytest.raises(Exception) as refused:
        Signoff(home, clock=clock)
    assert getattr(refused.value, "code", None) == "bad_config"


@pytest.mark.parametrize("change", [{"at": 1.5}, {"at": 2 ** 60}, {"v": True}, {"nonce": 7},
                                    {"extra": 1}])
def test_a_malformed_statement_is_a_mismatch_and_changes_nothing(signed, change):
    rt, people = signed
    key, digest = ready_task(rt, "s")
    minted = rt.statement(key, "ana")
    private, key_id = people["ana"]
    before = counted(rt)
    proof = Proof(dict(minted["statement"], **change), "approve", sign(private, minted), key_id)
    assert refusal(rt.approve, key, digest, by="ana", channel="api", proof=proof) == \
        "statement_mismatch"
    assert counted(rt) == before
