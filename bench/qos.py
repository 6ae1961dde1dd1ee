"""make bench qos: a call's delay while another device's bulk transfers saturate the line, with the
call's app at Normal and then High (prioritisation switched on halfway through one run, as the
original router's fig. 4.11 did), in both directions. Writes bench/results/qos.json (every
packet's delay) and docs/qos-call-delay.png (delay over time)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display: render straight to PNG
import matplotlib.pyplot as plt
from common import QOS_PLOT, REPO, add_client, homenet_up, write_result

from homenet.load import DOWN, UP, CallUnderLoad, call_under_load

APP = "video-call"
PLOT = REPO / QOS_PLOT
# The original router's fig. 4.11 (thesis chapter 4, section 4.4.3): game packets waited
# 200-500 ms behind HTTP on a 4 Mbit/s link before prioritisation, "significantly" less after.
ORIGINAL = "200-500 ms before prioritisation (fig. 4.11a)"


def set_priority(home, priority: str) -> None:
    home.hwdb(f"insert into AppPriority values ('{APP}', '{priority}')")


def qos(args) -> None:
    seconds = args.qos_seconds
    home = homenet_up()
    runs: dict[str, CallUnderLoad] = {}
    try:
        for name in ("phone", "console"):
            add_client(home, name, permit=True)
        for direction in (UP, DOWN):
            set_priority(home, "default")
            runs[direction] = call_under_load(
                home, "phone", "console", direction, seconds, during=(seconds / 2, lambda: set_priority(home, "high"))
            )
        set_priority(home, "default")
        health = home.api("GET", "health")[1]
    finally:
        home.down()
    rows, detail = [], {}
    for direction, run in runs.items():
        switched = run.changes[0]
        normal = {"p50_ms": run.p(50, 1.0, switched), "p99_ms": run.p(99, 1.0, switched)}
        high = {"p50_ms": run.p(50, switched + 1.0), "p99_ms": run.p(99, switched + 1.0)}
        detail[direction] = {
            **run.summary(),
            "switched_to_high_at_s": round(switched, 3),
            "normal": normal,
            "high": high,
            "packets": list(zip(run.sent_at_s, run.delays_ms, strict=True)),
        }
        rows.append(
            [
                f"call {direction}link p99 delay, bulk transfers saturating: High vs Normal",
                f"{high['p99_ms']:.1f} ms",
                f"{normal['p99_ms']:.1f} ms",
                f"{normal['p99_ms'] / high['p99_ms']:.0f}x lower" if high["p99_ms"] else "n/a",
                ">= 10x lower; the original: " + ORIGINAL,
            ]
        )
        rows.append(
            [
                f"call {direction}link loss over the whole call (its Normal half too) / bulk throughput",
                f"{run.loss_pct:.2f}% / {run.bulk_mbit:.1f} Mbit/s",
                "",
                "",
                "~0% loss; bulk >= 80% of the rest",
            ]
        )
    _plot(runs)
    write_result(
        "qos",
        {
            "what": "a 64 kbit/s two-way UDP call (50 packets/s) from one device while another "
            "runs 4 TCP bulk transfers (iperf3) over the emulated 20/30 Mbit/s line; the call's app "
            "goes from Normal to High halfway (the first second of each half is left out: the flow's "
            "first packets wait for the controller, and the change takes up to a second)",
            "shaper": health.get("qos"),
            "figure": PLOT.name,
            "rows": rows,
            "runs": detail,
        },
    )


def _plot(runs: dict[str, CallUnderLoad]) -> None:
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.2 * len(runs)), sharex=True)
    for ax, (direction, run) in zip(axes, runs.items(), strict=True):
        ax.plot(run.sent_at_s, run.delays_ms, ".", markersize=2)
        ax.axvline(run.changes[0], color="red", linestyle="--", label="video-call set to High")
        ax.set_yscale("log")
        ax.set_ylabel(f"{direction}link delay (ms)")
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("seconds into the call (bulk transfers running throughout)")
    fig.suptitle("A call's one-way delay beside saturating bulk transfers, Normal then High")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=100)
    plt.close(fig)
