"""`kpdiag completion install`: put the completion script where the user's shell looks for it, for this user only.

bash-completion loads ``$BASH_COMPLETION_USER_DIR/completions`` (default ``$XDG_DATA_HOME/bash-completion/completions``,
``~/.local/share/bash-completion/completions``) on demand; fish ``~/.config/fish/completions``; zsh whatever is on
``$fpath`` (``~/.zfunc`` here, with the line to add). The directories are created when missing (a fresh HOME has
none of them); nothing outside HOME (or the XDG directories) is written, and no shell start-up file is edited: when
nothing would load the file — bash-completion not installed — the hint says which line to add.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

BASH_COMPLETION_SCRIPTS = ("/usr/share/bash-completion/bash_completion", "/etc/bash_completion")


def completion_path(shell: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    data = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    config = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    if shell == "bash":
        base = env.get("BASH_COMPLETION_USER_DIR") or os.path.join(data, "bash-completion")
        return os.path.join(base, "completions", "kpdiag")
    if shell == "fish":
        return os.path.join(config, "fish", "completions", "kpdiag.fish")
    if shell == "zsh":
        return os.path.join(home, ".zfunc", "_kpdiag")
    raise ValueError(f"no completion for {shell!r}")


def install_completion(shell: str, script: str, env: dict | None = None) -> tuple[str, str]:
    """Write ``script`` for ``shell``; returns (the path written, what the user still has to do or "")."""
    path = completion_path(shell, env)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(script)
    os.replace(tmp, path)
    if shell == "bash":
        if any(os.path.isfile(p) for p in BASH_COMPLETION_SCRIPTS):
            return path, f"new bash shells complete kpdiag (this one: . {path})"
        return path, (
            "bash-completion is not installed, so nothing loads that directory: install it (apt-get install "
            f"bash-completion), or add this line to ~/.bashrc: . {path}"
        )
    if shell == "zsh":
        return path, "add to ~/.zshrc, before compinit: fpath=(~/.zfunc $fpath)"
    return path, "new fish shells complete kpdiag"
