"""The node collector reads the firmware's maker (/sys/class/dmi/id/sys_vendor under the host root) into
node/dmi-sys-vendor.txt, the cloud model's second witness after the Node's providerID (kpdiag/state/cloud.py); a
machine without DMI (a container, an ARM board) gives no file and no error."""

from kpdiag.bundle import sources
from kpdiag.collect.node import NodeCollector


def test_the_firmware_maker_is_collected_from_the_host_root(tmp_path):
    folder = tmp_path / "sys" / "class" / "dmi" / "id"
    folder.mkdir(parents=True)
    (folder / "sys_vendor").write_text("Amazon EC2\n")
    out = NodeCollector(host_root=str(tmp_path), only=[sources.DMI_VENDOR]).collect()
    assert out.files[sources.DMI_VENDOR] == b"Amazon EC2\n"


def test_no_dmi_is_no_file_and_no_error(tmp_path):
    out = NodeCollector(host_root=str(tmp_path), only=[sources.DMI_VENDOR]).collect()
    assert sources.DMI_VENDOR not in out.files and out.errors == []
