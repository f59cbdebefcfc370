#!/usr/bin/python3
"""The ONNX importer on every classification model of Debian's torchvision: each exported with
torch.onnx.export at the given opsets, with and without weights, with and without a dynamic
batch axis, then imported with `tierpool schedule from-onnx`.

  scripts/onnx-corpus.py --tool build/ci/client/tierpool [--models resnet18,swin_t]
      [--opsets 13,14,17] [--variants weights,no-weights,dynamic,no-weights+dynamic]
      [--json OUT.json] [--ops-table OPS.md]
  scripts/onnx-corpus.py --export-to OUT.onnx --models NAME [--opsets 17]
      [--variants no-weights+dynamic]   (one export, nothing imported: planning-corpus.py's)

Each import must succeed, and its WEIGHT bytes must equal the bytes of the file's weights: its
initializers (export folds BatchNorm into convolutions and may fold other constants, so these
can differ from the module's parameters, and the table says by how much), or, exported without
weights, the graph inputs that carry them (the module's parameters and the buffers the graph
reads). Prints a markdown table; exits 1 if any import failed or any size disagrees. Models
PyTorch cannot export are listed and not counted (the importer never saw them).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

VARIANTS = ["weights", "no-weights", "dynamic", "no-weights+dynamic"]


def export(name, opset, variant, path):
    import torch
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    size = 299 if name.startswith("inception") else 224
    x = torch.randn(1, 3, size, size)
    kwargs = {"input_names": ["x"], "opset_version": opset,
              "export_params": "no-weights" not in variant}
    if "dynamic" in variant:
        kwargs["dynamic_axes"] = {"x": {0: "batch"}}
    # Not under no_grad: in eval mode that takes the fused attention kernel, which has no export.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, **kwargs)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return params


def file_weights(path, with_weights):
    """Bytes of the weights the file carries: initializers, or the non-data graph inputs."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    elem = {1: 4, 2: 1, 3: 1, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 16: 2}
    total = 0
    if with_weights:
        for t in m.graph.initializer:
            n = 1
            for d in t.dims:
                n *= d
            total += n * elem.get(t.data_type, 0)
        return total, collections.Counter(n.op_type for n in m.graph.node)
    inits = {t.name for t in m.graph.initializer}
    for i in m.graph.input:
        if i.name == "x" or i.name in inits:
            continue
        n = 1
        for d in i.type.tensor_type.shape.dim:
            n *= d.dim_value
        total += n * elem.get(i.type.tensor_type.elem_type, 0)
    for t in m.graph.initializer:  # constants the exporter kept (shapes, indices)
        n = 1
        for d in t.dims:
            n *= d
        total += n * elem.get(t.data_type, 0)
    return total, collections.Counter(n.op_type for n in m.graph.node)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--opsets", default="13,14,17")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json")
    ap.add_argument("--ops-table")
    ap.add_argument("--export-to", help="export the one model of --models (first opset and "
                    "variant) to this file and stop")
    a = ap.parse_args()
    if a.export_to:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(a.models, int(a.opsets.split(",")[0]), a.variants.split(",")[0], a.export_to)
        return 0
    import torchvision
    models = a.models.split(",") if a.models else torchvision.models.list_models(module=torchvision.models)
    rows, failures, export_failures = [], 0, 0
    ops = collections.Counter()
    print("| model | opset | variant | import | steps | weight bytes | = file's | vs parameters | s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            for opset in [int(o) for o in a.opsets.split(",")]:
                for variant in a.variants.split(","):
                    onnx_path = os.path.join(tmp, "m.onnx")
                    out = os.path.join(tmp, "m.json")
                    t0 = time.time()
                    row = {"model": name, "opset": opset, "variant": variant}
                    try:
                        params = export(name, opset, variant, onnx_path)
                    except Exception as e:  # noqa: BLE001 - an export failure is a row
                        # PyTorch's exporter, not the importer: listed, not counted against it.
                        export_failures += 1
                        row.update(ok=None, error="export: %s" % str(e).splitlines()[0][:160])
                        rows.append(row)
                        print("| %s | %d | %s | export failed: %s | | | | | |" % (name, opset, variant, row["error"]))
                        continue
                    expected, node_ops = file_weights(onnx_path, "no-weights" not in variant)
                    ops.update(node_ops.keys())
                    cmd = [a.tool, "schedule", "from-onnx", onnx_path, "-o", os.path.join(tmp, "m.pb"),
                           "--json", out, "--batch", "4" if "dynamic" in variant else "1"]
                    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    seconds = time.time() - t0
                    if p.returncode != 0:
                        failures += 1
                        row.update(ok=False, error=p.stderr.strip().splitlines()[-1][:200])
                        print("| %s | %d | %s | **failed**: %s | | | | %.0f |" % (name, opset, variant, row["error"], seconds))
                        rows.append(row)
                        sys.stdout.flush()
                        continue
                    with open(out) as f:
                        s = json.load(f)
                    weights = sum(int(t["size_bytes"]) for t in s["tensors"] if t.get("kind") == "WEIGHT")
                    ruled = sum(1 for t in s["tensors"] if t.get("shape_rule"))
                    same = weights == expected
                    if not same:
                        failures += 1
                    row.update(ok=same, steps=len(s["steps"]), weight_bytes=weights, sized_by_rule=ruled,
                               file_bytes=expected, param_bytes=params, seconds=seconds)
                    rows.append(row)
                    print("| %s | %d | %s | %s | %d | %d | %s | %+.2f%% | %.0f |" % (
                        name, opset, variant, "ok" if same else "**size differs**", len(s["steps"]),
                        weights, "yes" if same else "no (%d)" % expected,
                        100.0 * (weights / params - 1) if params else 0, seconds))
                    sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "ops": sorted(ops)}, f, indent=1)
    if a.ops_table:
        with open(a.ops_table, "w") as f:
            f.write("\n".join(sorted(ops)) + "\n")
    sys.stderr.write("%d of %d imports failed or disagree; %d exports failed in PyTorch\n"
                     % (failures, len(rows) - export_failures, export_failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
