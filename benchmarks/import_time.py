"""What ``import differank.losses`` costs over ``import torch``, in fresh processes.

Each repeat starts one interpreter per command, interleaved (so drifting machine load hits both
alike), and times it end to end; the table gives the median and the fastest of ``--repeats``
runs and the difference of the medians. Writes the table, the command that made it and the
provenance line to ``benchmarks/results/import_time.md``.

    python benchmarks/import_time.py --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import measure

COMMANDS = {
    "import torch": "import torch",
    "import torch; import differank.losses": "import torch; import differank.losses",
}
RESULT = Path(__file__).resolve().parent / "results" / "import_time.md"


def process_seconds(code: str) -> float:
    """Wall-clock seconds of a fresh ``python -c code``, interpreter start included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def table(repeats: int) -> str:
    seconds: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(repeats):
        for name, code in COMMANDS.items():
            seconds[name].append(process_seconds(code))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    lines = [
        f"| command (fresh process, {repeats} interleaved runs) | median s | fastest s |",
        "|---|---|---|",
    ]
    lines += [
        f'| `python -c "{name}"` | {medians[name]:.2f} | {min(values):.2f} |'
        for name, values in seconds.items()
    ]
    torch_only, with_losses = medians.values()
    lines.append(
        f"\n`import differank.losses` over `import torch`: {with_losses - torch_only:+.2f} s"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per command")
    parser.add_argument("--out", type=Path, default=RESULT, help="the markdown result file")
    args = parser.parse_args()
    body = table(args.repeats)
    command = f"python benchmarks/import_time.py --repeats {args.repeats}"
    text = f"# Import time\n\nCommand: `{command}`\n\n{body}\n" + measure.metadata_line(
        measure.run_metadata()
    )
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
