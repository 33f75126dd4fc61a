#!/usr/bin/env python3
"""Generates the package's gRPC stubs from the repository's proto/ with grpcio-tools.

    gen_stubs.py            rewrite src/informerd/v1/ from proto/informerd/v1/*.proto
    gen_stubs.py --check    exit 1 (naming the files) if the checked-in stubs differ from what
                            proto/ generates today

Message code (*_pb2.py), service stubs (*_pb2_grpc.py) and typed stubs for both (*.pyi, from
mypy-protobuf) are generated; the proto package informerd.v1 becomes the Python package
informerd.v1, inside this SDK's own package, so the generated imports resolve to it.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
PROTO_ROOT = REPO / "proto"
OUT = SDK / "src" / "informerd" / "v1"


def generate(into: Path) -> None:
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "informerd/v1").glob("*.proto")
    )
    scripts = Path(sysconfig.get_path("scripts"))
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={into}",
        f"--grpc_python_out={into}",
        f"--mypy_out={into}",
        f"--mypy_grpc_out={into}",
        f"--plugin=protoc-gen-mypy={scripts / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={scripts / 'protoc-gen-mypy_grpc'}",
        *protos,
    ]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"grpc_tools.protoc failed with exit code {done.returncode}")
    (into / "informerd" / "v1" / "__init__.py").write_text(
        '"""informerd.v1 generated from proto/informerd/v1 (sdk/python/tools/gen_stubs.py)."""\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs drifted")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "informerd" / "v1"
        if args.check:
            names = sorted({p.name for p in fresh.iterdir()} | {p.name for p in OUT.glob("*.py*")})
            drifted = [
                n
                for n in names
                if not (fresh / n).exists()
                or not (OUT / n).exists()
                or not filecmp.cmp(fresh / n, OUT / n, shallow=False)
            ]
            if drifted:
                print(
                    "sdk/python stubs differ from proto/ (run sdk/python/tools/gen_stubs.py): "
                    + ", ".join(drifted),
                    file=sys.stderr,
                )
                return 1
            print(f"sdk/python stubs match proto/ ({len(names)} files)")
            return 0
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(fresh, OUT)
        print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
