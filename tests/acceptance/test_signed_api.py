"""Signed approvals through the JSON API of a real ``signoff serve`` (docs/api.md,
"Signed decisions"): statements fetched and signed with Ed25519 keys, the refusals
(403, nothing recorded) and a two-reviewer quorum that ends done.
"""

import base64

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from helpers import LOCAL_TLS, read_here
from servekit import Server, event, make_home
from signoff.models import Approval, Audit, StatementNonce


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def site(home):
    """Monitor ``s`` (two signed approvals) with one ready task; reviewers ana and bo
    holding a key each; ``client(name)`` speaks the API as that reviewer."""
    rt = read_here(make_home(home))
    rt.bind("doc-demo", "s", window_s=3600, approvals=2, signed_approvals=True)
    rt.enqueue_events([event(1)], monitor_id="s")
    rt.run_until_idle()
    people = {}
    for name in ("ana", "bo"):
        token = rt.add_reviewer(name)["token"]
        key = Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        people[name] = (token, key, rt.add_reviewer_key(name, public)["key_id"])
    server = Server(home)
    clients = {}

    def client(name):
        if name not in clients:
            clients[name] = httpx.Client(
                verify=LOCAL_TLS, base_url=server.url + "/api/v1", timeout=30,
                headers={"authorization": f"Bearer {people[name][0]}"})
        return clients[name]
    [task] = [t for t in rt.tasks() if t["monitor"] == "s"]
    yield rt, task, people, client
    for c in clients.values():
        c.close()
    assert server.stop() == 0, server.stderr()
    rt.close()


def signed_body(people, name, minted, **extra):
    _, key, key_id = people[name]
    return {"statement": minted["statement"], "key_id": key_id,
            "signature": b64url(key.sign(minted["canonical"].encode("utf-8"))), **extra}


def recorded(rt, key):
    return (Approval.select().where(Approval.task_key == key).count(),
            Audit.select().where(Audit.task_key == key).count(), rt.task(key)["status"])


def test_two_reviewers_sign_through_the_api_and_the_task_is_done(site):
    rt, task, people, client = site
    key, digest = task["key"], task["digest"]
    for name, status in (("ana", "ready"), ("bo", "approved")):
        r = client(name).get(f"/tasks/{key}/statement")
        assert r.status_code == 200, r.text
        minted = r.json()
        assert sorted(minted) == ["canonical", "challenge", "statement"]
        assert (minted["statement"]["reviewer"], minted["statement"]["digest"]) == (name, digest)
        r = client(name).post(f"/tasks/{key}/approve",
                              json=signed_body(people, name, minted, digest=digest))
        assert r.status_code == 200, r.text
        assert r.json()["status"] == status
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    assert [a.data["key_id"] for a in Audit.select().where(
        Audit.task_key == key, Audit.code.in_(["approval_added", "approved"])).order_by(
        Audit.seq)] == [people["ana"][2], people["bo"][2]]


def test_refusals_answer_403_with_their_code_and_record_nothing(site):
    rt, task, people, client = site
    key, digest = task["key"], task["digest"]
    ana = client("ana")
    before = recorded(rt, key)
    r = ana.post(f"/tasks/{key}/approve", json={"digest": digest})
    assert (r.status_code, r.json()["error"]) == (403, "signature_required")
    minted = ana.get(f"/tasks/{key}/statement").json()
    wrong = dict(signed_body(people, "ana", minted, digest=digest),
                 signature=b64url(Ed25519PrivateKey.generate().sign(b"x")))
    changed = signed_body(people, "ana", dict(minted, statement=dict(minted["statement"],
                                                                      digest="f" * 64)),
                          digest=digest)
    for body, code in ((wrong, "bad_signature"),
                       (dict(signed_body(people, "ana", minted, digest=digest),
                             key_id=people["bo"][2]), "unknown_key"),
                       (changed, "statement_mismatch")):
        r = ana.post(f"/tasks/{key}/approve", json=body)
        assert (r.status_code, r.json()["error"]) == (403, code), r.text
    assert recorded(rt, key) == before
    # The refusals spent nothing: the same statement, signed right, counts once.
    good = signed_body(people, "ana", minted, digest=digest)
    assert ana.post(f"/tasks/{key}/approve", json=good).json()["approvals_missing"] == 1
    after = recorded(rt, key)
    r = ana.post(f"/tasks/{key}/approve", json=good)
    assert (r.status_code, r.json()["error"]) == (403, "nonce_used")
    assert recorded(rt, key) == after


def test_an_expired_statement_is_refused(site):
    rt, task, people, client = site
    key, digest = task["key"], task["digest"]
    minted = client("bo").get(f"/tasks/{key}/statement").json()
    # Five minutes later by signoff's clock: the nonce's row is moved back, as time would.
    StatementNonce.update(issued_at=StatementNonce.issued_at - 301).execute()
    before = recorded(rt, key)
    earlier = dict(minted["statement"], at=minted["statement"]["at"] - 301)
    r = client("bo").post(f"/tasks/{key}/approve", json=signed_body(
        people, "bo", {"statement": earlier, "canonical": rfc8785.dumps(earlier).decode()},
        digest=digest))
    assert (r.status_code, r.json()["error"]) == (403, "nonce_expired"), r.text
    assert recorded(rt, key) == before


def test_a_signed_edit_and_a_signed_reject(site):
    rt, task, people, client = site
    key, digest = task["key"], task["digest"]
    text = "Suggested demo date for doc-demo: 2026-11-02"
    r = client("ana").post(f"/tasks/{key}/statement?decision=edit", json={"edit": text})
    minted = r.json()
    assert minted["statement"]["decision"] == "edit" and minted["statement"]["digest"] != digest
    r = client("ana").post(f"/tasks/{key}/approve",
                           json=signed_body(people, "ana", minted, digest=digest, edit=text))
    assert r.status_code == 200, r.text
    assert r.json()["digest"] == minted["statement"]["digest"]
    assert client("bo").get(f"/tasks/{key}/statement?decision=edit").status_code == 400
    minted = client("bo").get(f"/tasks/{key}/statement?decision=reject").json()
    r = client("bo").post(f"/tasks/{key}/reject", json=signed_body(people, "bo", minted,
                                                                     reason="not this"))
    assert r.status_code == 200 and r.json()["status"] == "rejected", r.text
