"""The README's API example runs as written, on the embedded model it names, and skips what its campaign says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests import ROOT


def test_the_readme_api_example_runs_as_written():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Using TeaCache in code") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    result = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    computed, skipped = (int(v) for v in result.stdout.split()[:2])
    assert computed + skipped == 28 and skipped > 0
