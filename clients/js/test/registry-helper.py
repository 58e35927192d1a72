# A loopback docker-registry with one busybox image built offline
# (tests/oci/fixture.py), for the JS client's image tests: prints the
# image's reference and its OCI layout directory, a line each, then keeps the registry up until its stdin
# closes (the test's end), and removes everything it made.
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "oci"))
import fixture  # noqa: E402

with tempfile.TemporaryDirectory(prefix="moat-jsreg-") as t, fixture.Registry() as reg:
    lay = fixture.build_image(sys.argv[1] if len(sys.argv) > 1 else "multi", Path(t) / "img")
    # the reference, then the OCI layout directory (for an import)
    print(reg.push(lay, "moat/js"), flush=True)
    print(lay, flush=True)
    sys.stdin.read()
