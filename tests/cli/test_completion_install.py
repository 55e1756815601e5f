"""`kpdiag completion install` on a clean HOME (no ~/.local, no ~/.config, no XDG variables): the script lands where
bash-completion looks, the directories made, the path said; what loads it is said too."""

import os
import subprocess
import sys

import pytest

from kpdiag.commands.completion import BASH_COMPLETION_SCRIPTS


def _install(home, *args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "BASH_COMPLETION"))}
    base.update(HOME=str(home), SHELL="/bin/bash", **env)
    return subprocess.run(
        [sys.executable, "-m", "kpdiag", "completion", "install", *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=60,
    )


def test_bash_completion_installs_on_a_clean_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _install(home)
    assert proc.returncode == 0, proc.stderr
    path = home / ".local" / "share" / "bash-completion" / "completions" / "kpdiag"
    assert path.is_file() and proc.stdout == ""
    assert f"kpdiag: wrote {path}\n" in proc.stderr
    if any(os.path.isfile(p) for p in BASH_COMPLETION_SCRIPTS):
        assert "new bash shells complete kpdiag" in proc.stderr
    else:  # a minimal machine: nothing would load the directory, so the line for ~/.bashrc is given
        assert f"add this line to ~/.bashrc: . {path}" in proc.stderr
    # what bash gets from it: kpdiag is completed by kpdiag's own function
    loaded = subprocess.run(["bash", "-c", f". {path} && complete -p kpdiag"], capture_output=True, text=True)
    assert loaded.returncode == 0 and "_kpdiag_completion kpdiag" in loaded.stdout, loaded.stderr
    # again: replaced, not appended
    first = path.read_text()
    assert _install(home).returncode == 0 and path.read_text() == first


@pytest.mark.parametrize(
    "shell, where",
    [
        ("fish", ".config/fish/completions/kpdiag.fish"),
        ("zsh", ".zfunc/_kpdiag"),
    ],
)
def test_other_shells(tmp_path, shell, where):
    proc = _install(tmp_path, "--shell", shell)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / where).is_file() and str(tmp_path / where) in proc.stderr


def test_xdg_data_home_is_respected_and_an_unwritable_home_is_one_line(tmp_path):
    proc = _install(tmp_path, XDG_DATA_HOME=str(tmp_path / "data"))
    assert proc.returncode == 0 and (tmp_path / "data" / "bash-completion" / "completions" / "kpdiag").is_file()
    blocked = tmp_path / "file"
    blocked.write_text("")  # HOME is a file: nothing can be made below it
    proc = _install(blocked)
    assert proc.returncode == 3 and len(proc.stderr.splitlines()) == 1 and "kpdiag: error: " in proc.stderr
