"""The flows behind the commands, each on the one pipeline (pipeline.py):

- record.py      run every scenario under its lock and keep the results as goldens
- check.py       the candidate locks against one Baseline: the goldens, baseline locks (A/B)
                 or a git merge base (resolved into baseline locks by git_base.py)
- ab.py          A/B: candidate and baseline locks run side by side; `diff`
- git_base.py    `check --base REF`: A/B against the locks at the merge base, from git
- propose.py     resolve upgrades into the cache and A/B them against the current locks
- bisect.py      the smallest set of changed packages behind a failing A/B verdict
- shards.py      the plan as a CI matrix, one part of it, and merging the parts' reports
- accept.py      adopt a check's candidate results as goldens, on purpose, saying why
- frameworks.py  compare-frameworks: the bundled families in every pinned framework, measured
- build.py       `lockguard build` and `images pin`: the docker backend's images, apart from a
                 check

`lockguard init` (adding lockguard to a project) is no flow: lockguard/init/ holds it, and uses
these.

goldens.py holds what record and the golden check share (hardware classes, inputs digest,
comparing with a golden), report_parts.py what every flow puts into its Report (report_for:
the one end of every flow that runs scenarios). Every flow takes the invocation's
settings.Settings, resolved once by the command line; none reads its options itself.
"""
