"""Opening a model for planning: wall time and peak RSS of ``workbench inspect --json``,
real weights against the meta device (structure only).

Each case runs in a fresh process (peak RSS is ``ru_maxrss`` of that process, imports
included), ``--rounds`` times; the median time and the largest RSS are printed. Cases:

- ``vit_l_16``: torchvision ViT-L/16 (random init), real and ``--meta``;
- ``timm:vit_large_patch16_224``: timm ViT-L, real and ``--meta``;
- ``hf:<llama-7b config>``: a Llama-7B-shaped ``config.json`` without weights, which opens
  on the meta device by itself (a real fp32 build would allocate ~27 GB).

Nothing is asserted; tests/core/models/test_meta.py holds the RSS bound of the 7B case.

Run: python tests/benchmarks/bench_model_open.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LLAMA_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}

_CHILD = """
import contextlib, io, json, resource, sys, time
t0 = time.perf_counter()
from workbench.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(["inspect", *sys.argv[1:], "--json", "--depth", "0"])
total = json.loads(out.getvalue())["counts"]["total"] if rc == 0 else None
print(json.dumps({"rc": rc, "s": time.perf_counter() - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "params": total}))
"""


def _run(argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, *argv], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"rc": proc.returncode, "error": proc.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp()) / "llama7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_7B))
    cases = [
        ("vit_l_16", ["vit_l_16"]),
        ("vit_l_16 --meta", ["vit_l_16", "--meta"]),
        ("timm ViT-L", ["timm:vit_large_patch16_224"]),
        ("timm ViT-L --meta", ["timm:vit_large_patch16_224", "--meta"]),
        ("llama-7b config (meta)", [f"hf:{folder}"]),
    ]
    results = {}
    for label, argv in cases:
        runs = [_run(argv) for _ in range(args.rounds)]
        ok = [r for r in runs if r.get("rc") == 0]
        if not ok:
            results[label] = {"error": runs[-1].get("error")}
            print(f"{label:<26} failed: {runs[-1].get('error')}")
            continue
        res = {"median_s": statistics.median(r["s"] for r in ok), "peak_rss_mb": max(r["rss_mb"] for r in ok),
               "params": ok[0]["params"]}
        results[label] = res
        print(f"{label:<26} {res['median_s']:6.1f} s  {res['peak_rss_mb']:7.0f} MB  {res['params']:,} params")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
