"""The GPU check's summary: one line per profile (devices, verdict, shares), then the checks.

    python benchmarks/gpu_check/summary.py OUT_DIR [--enforce]

Reads OUT_DIR/*.json (`tfdoctor profile --format json` reports). With --enforce (on a GPU), a failed check
exits 1; on the CPU fallback the checks are printed only, since a few rounds there are not enough to judge.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _line(name: str, report: dict) -> str:
    shares = report.get("shares") or {}
    parts = "  ".join(f"{part} {share:.0%}" for part, share in shares.items())
    devices = report["devices"]
    return (f"{name:<22} {devices['kind']:<12} {len(devices['names'])} replicas  "
            f"{report['verdict']['primary']:<14} {parts}")


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    reports = {path.stem: json.loads(path.read_text()) for path in sorted(out.glob("*.json"))}
    for name, report in reports.items():
        print(_line(name, report))
        for tuned in [report["comparison"]["tuned"]] if report.get("comparison") else []:
            print(_line(name.replace("both", "tuned"), tuned))
        print(f"{'':<22} verdict: {report['verdict']['statement']}")
    checks = {}
    for name, report in reports.items():
        if report.get("comparison"):
            checks[f"{name}: naive is input-bound"] = report["verdict"]["primary"] == "input-bound"
            speedup = report["comparison"]["speedup_tuned_over_naive"]
            checks[f"{name}: tuned faster than naive ({speedup or 0:.1f}x)"] = bool(speedup and speedup > 1)
        if ("sync_heavy" in name or name.startswith("reference_2")) and report.get("breakdown_s"):
            checks[f"{name}: sync > 0 ({report['breakdown_s']['sync'] * 1000:.1f} ms)"] = report["breakdown_s"]["sync"] > 0
        if "input_bound" in name:
            checks[f"{name}: input-bound"] = report["verdict"]["primary"] == "input-bound"
        for row in report.get("what_if") or []:
            measured = (f"{row['speedup']:.2f}x ({row['interval'][0]:.2f}-{row['interval'][1]:.2f})"
                        if row["applied"] and row["interval"] else f"not applied: {row['why_not']}")
            print(f"{'':<22} what-if {row['change']}: {measured}")
        if report.get("what_if"):
            first = report["what_if"][0]
            checks[f"{name}: an input change measured best ({first['change']} {first['speedup'] or 0:.2f}x)"] = (
                first["change"] in ("input-on-device", "tf-data-tuned") and (first["speedup"] or 0) >= 1.3)
        clock = report.get("clock_check")
        if clock and clock.get("synced_s"):
            print(f"{name:<22} clock check: waited {clock['waited_s'] * 1000:.1f} ms, synced "
                  f"{clock['synced_s'] * 1000:.1f} ms ({clock['clock']}), trace {clock.get('trace_step_ms')} ms")
    for check, ok in checks.items():
        print(f"check: {check}: {'yes' if ok else 'NO'}")
    return 1 if "--enforce" in argv and not all(checks.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
