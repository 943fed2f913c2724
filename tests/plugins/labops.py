"""An operator's bulk approval, run as a process of its own (a partition test runs it in
the operator's network namespace, where the MCP host can be reached).

``python -m labops HOME [MONITOR]``: approve every ready task (of MONITOR alone, if
given) in one ``Signoff.approve_many`` call, one transaction; prints
``{"approved": n, "refused": {code: n}}``. A database that cannot be reached is
exit 1 with the code, as the CLI says it.
"""

import json
import sys
from collections import Counter

from signoff import storage
from signoff.app import Signoff
from signoff.errors import Refused, SignoffError
from signoff.models import Task


def approve_all(home, monitor=None):
    """The answer counts of one bulk approval of the ready tasks."""
    rt = Signoff(home)
    try:
        with storage.session(rt.database):
            query = Task.select(Task.key, Task.digest).where(Task.status == "ready")
            if monitor is not None:
                query = query.where(Task.monitor == monitor)
            ready = [(t.key, t.digest) for t in query]
        answers = rt.approve_many(ready, by="bulk") if ready else []
    finally:
        rt.close()
    refused = Counter(a.code for a in answers if isinstance(a, Refused))
    return {"approved": len(answers) - sum(refused.values()), "refused": dict(refused)}


def main(argv):
    from peewee import DatabaseError
    try:
        print(json.dumps(approve_all(*argv)))
    except SignoffError as exc:
        print(json.dumps({"error": exc.code, "message": exc.message}))
        return 1
    except DatabaseError as exc:
        print(json.dumps(dict(zip(("error", "message"), storage.describe(exc, None)))))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
