"""Library warnings never reach the user's stderr: scapy's "MAC address to reach destination not found" (logged for
each probe to a neighbour that does not answer ARP), and Python warnings of the libraries kpdiag uses."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from kpdiag.cli import main
code = main(sys.argv[1:])
from scapy.error import warning   # scapy's own call, as scapy.layers.l2 makes it when ARP gets no answer
warning("MAC address to reach destination not found. Using broadcast.")
warning("MAC address to reach destination not found. Using broadcast.")
import urllib3, warnings
warnings.warn("Unverified HTTPS request", urllib3.exceptions.InsecureRequestWarning)
print("exit", code)
"""


def test_scapy_and_library_warnings_stay_off_stderr(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, "checks", "-o", "json"], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.rstrip().endswith("exit 0"), proc.stdout[-200:] + proc.stderr
    assert proc.stderr == "", proc.stderr


def test_without_kpdiag_scapy_would_print_it(tmp_path):
    """The check above can fail: the same calls without kpdiag's entry point print scapy's warning."""
    script = "\n".join(line for line in SCRIPT.splitlines() if "main" not in line).replace("code", "0")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "MAC address to reach destination not found" in proc.stderr
