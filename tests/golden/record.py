"""Re-record the golden outputs (run from the repository root): python tests/golden/record.py"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from golden_cases import CASES, path, run

if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    for name in names:
        code, data = run(CASES[name])
        path(name).write_text(json.dumps({"exit_code": code, "output": data}, indent=1, sort_keys=True) + "\n")
        print(f"{name}: exit {code}")
