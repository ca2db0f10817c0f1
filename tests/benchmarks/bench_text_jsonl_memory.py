"""Memory per line of ``text:PATH.jsonl``: the streamed reader keeps offsets and labels only.

Writes a ``.jsonl`` file of N short classification lines, then, in a fresh process per N,
opens it with :class:`~workbench.core.training.text_jsonl.JsonlTextDataset` (a tiny BERT
word-piece tokenizer) and prints the resident-memory growth per line, and the peak growth
(``ru_maxrss``) per line, of opening it and reading one batch.

Run: ``python tests/benchmarks/bench_text_jsonl_memory.py [N ...]`` (default 20000 200000).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "great", "awful", "the", "was"]


def _child(folder: str, data: str) -> None:
    import psutil
    from transformers import BertTokenizerFast

    from workbench.core.training.text_jsonl import JsonlTextDataset

    tok = BertTokenizerFast.from_pretrained(folder, local_files_only=True)
    proc = psutil.Process()
    before = proc.memory_info().rss
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ds = JsonlTextDataset(data, tok, seq_len=32)
    _ = [ds[i] for i in range(32)]
    after = proc.memory_info().rss
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"lines": len(ds), "rss_growth": after - before, "peak_growth": max(0, peak - peak_before)}))


def main(counts: list[int]) -> None:
    from transformers import BertTokenizerFast

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "vocab.txt").write_text("\n".join(WORDS) + "\n")
        BertTokenizerFast(vocab_file=str(root / "vocab.txt")).save_pretrained(root / "tok")
        print(f"{'lines':>10}  {'RSS growth':>12}  {'per line':>9}  {'peak growth':>12}  {'per line':>9}")
        for n in counts:
            data = root / f"d{n}.jsonl"
            with data.open("w") as f:
                for i in range(n):
                    f.write(json.dumps({"text": "the movie was good" if i % 2 else "awful bad movie", "label": i % 2}) + "\n")
            out = subprocess.run([sys.executable, __file__, "--child", str(root / "tok"), str(data)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{r['lines']:>10,}  {r['rss_growth'] / 2**20:>9.1f} MB  {r['rss_growth'] / r['lines']:>7.1f} B"
                  f"  {r['peak_growth'] / 2**20:>9.1f} MB  {r['peak_growth'] / r['lines']:>7.1f} B")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3])
    else:
        main([int(a) for a in sys.argv[1:]] or [20_000, 200_000])
