"""Read what one Service needs from the Kubernetes API, through the official client.

Only that Service, its EndpointSlices, the pods its selector picks, the node kpdiag runs on,
kube-proxy's ConfigMap and DaemonSet, and the server version — never every object of a big
cluster. Each object is kept as the API's own JSON and written in the bundle's ``cluster/``
files as a v1 List (what ``kubectl get … -o json`` prints). Every failure (no credentials,
RBAC denied, API unreachable, not found) is a recorded reason, and the rest goes on.

Label selectors are sent to the server *and* re-checked here: kpdiag never trusts a server's
filtering (some servers and proxies ignore ``labelSelector``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field

from kpdiag import secrets
from kpdiag.parse.decode import load_json
from kpdiag.bundle import sources
from kpdiag.manifests import apply_command
from kpdiag.state.cluster import selector_matches

API_TIMEOUT = 5.0
SERVICE_LOOKUP = sources.SERVICE_LOOKUP


@dataclass
class ClusterData:
    files: dict[str, bytes] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    api: str | None = None  # the server URL used


def _as_list(kind: str, items: list) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1).encode()


def _causes(exc: BaseException):
    """``exc`` and what it wraps: urllib3's MaxRetryError keeps the cause in ``reason``, others in __cause__/__context__
    or in their args."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 12:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        reason = getattr(e, "reason", None)
        todo += [reason] if isinstance(reason, BaseException) else []
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        todo += [e.__cause__, e.__context__]


def _endpoint(server: str | None) -> tuple[str, str]:
    """(host, host:port) of the server URL."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(server or "")
        host = u.hostname or ""
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return server or "?", server or "?"
    return host, f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"


def _can_i(what: str) -> str:
    """``kubectl auth can-i …`` for a call described as "list pods in shop", "get service shop/web", "get node n1"."""
    words = what.split()
    if len(words) < 2 or words[1].startswith("/"):
        return ""
    verb, res = words[0], words[1]
    plural = {"service": "services", "node": "nodes", "configmap": "configmaps", "daemonset": "daemonsets"}.get(
        res, res
    )
    ns = ""
    if len(words) >= 4 and words[2] == "in":
        ns = " -A" if words[3] == "all" else f" -n {words[3]}"
    elif len(words) >= 3 and "/" in words[2]:
        ns = f" -n {words[2].split('/', 1)[0]}"
    return f"kubectl auth can-i {verb} {plural}{ns}"


def _status_message(exc) -> str:
    """The API's own message from a Status body (``pods is forbidden: User "x" cannot list …``), whole, or ""."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip():
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    msg = doc.get("message") if isinstance(doc, dict) else None
    if not isinstance(msg, str):
        return ""
    msg = " ".join(msg.split())
    return msg if len(msg) <= 400 else ""


def api_reason(exc: Exception, what: str, server: str | None) -> str:
    """One whole line that says which call failed, against which server, why (DNS, refused, TLS, a timeout, 401/403
    and what was denied, a cap) and what to do — no credential in it (kpdiag.secrets.scrub)."""
    return secrets.scrub(_api_reason(exc, what, server))


def _api_reason(exc: Exception, what: str, server: str | None) -> str:
    import socket
    import ssl

    from .kubeapi import ApiBound, ApiDeadline

    where = secrets.shown_url(server)
    host, hostport = _endpoint(server)
    status = getattr(exc, "status", None)
    if isinstance(exc, ApiDeadline):
        return f"{what}: the API server {where} did not answer in time ({exc}): stopped at kpdiag's deadline"
    if isinstance(exc, ApiBound):
        return f"{what}: {exc}"
    if isinstance(status, int) and status:
        msg = _status_message(exc)
        said = f" ({msg})" if msg and msg.lower() not in ("unauthorized", "forbidden") else ""
        if status == 401:
            return (
                f"{what}: the API server {where} does not accept the credentials (401 Unauthorized){said} — the token "
                "or client certificate is expired or not this cluster's: refresh the kubeconfig or pick another --context"
            )
        if status == 403:
            check = _can_i(what)
            return (
                f"{what}: 403 Forbidden — RBAC does not allow it{said}; "
                + (f"check with: {check}; " if check else "")
                + f"kpdiag's read-only grants: {apply_command('svc')} (set its subjects and namespaces first)"
            )
        if status == 404:
            return f"{what}: 404 Not Found{said}"
        reason = getattr(exc, "reason", "") or ""
        reason = reason if isinstance(reason, str) else ""
        return f"{what}: the API server {where} answered HTTP {status} {reason}".rstrip() + said
    causes = list(_causes(exc))
    names = {c.__class__.__name__ for c in causes}
    for c in causes:
        if isinstance(c, socket.gaierror) or c.__class__.__name__ == "NameResolutionError":
            why = (
                next((x.strerror for x in causes if isinstance(x, socket.gaierror) and x.strerror), "") or "no address"
            )
            return (
                f"{what}: the API server {where} is unreachable: its name {host!r} does not resolve (DNS: {why}) — "
                "check the server address in the kubeconfig and this host's DNS"
            )
    for c in causes:
        if isinstance(c, ssl.SSLCertVerificationError):
            detail = getattr(c, "verify_message", "") or "certificate verify failed"
            return (
                f"{what}: TLS: the certificate of the API server {where} is not trusted ({detail}) — the kubeconfig's "
                "certificate-authority is not the one that signed this server's certificate (wrong cluster or CA?)"
            )
    for c in causes:
        if isinstance(c, ssl.SSLError):
            detail = getattr(c, "reason", None) or c.__class__.__name__
            return f"{what}: TLS handshake with the API server {where} failed ({detail}) — is it an HTTPS endpoint?"
    for c in causes:
        if isinstance(c, ConnectionRefusedError):
            return (
                f"{what}: the API server {where} is unreachable: connection refused (nothing listens on {hostport}) — "
                "is the address right and the API server up?"
            )
    if "ConnectTimeoutError" in names:
        return (
            f"{what}: the API server {where} is unreachable: no connection within the timeout (a firewall, a wrong "
            "address or a network that drops the packets)"
        )
    if "ReadTimeoutError" in names or any(isinstance(c, (TimeoutError, socket.timeout)) for c in causes):
        return f"{what}: the API server {where} accepted the connection, then timed out (no answer within the timeout)"
    for c in causes:
        if isinstance(c, (ConnectionResetError, BrokenPipeError)) or c.__class__.__name__ in (
            "ProtocolError",
            "RemoteDisconnected",
            "IncompleteRead",
        ):
            return f"{what}: the API server {where} closed the connection before a complete answer"
    for c in causes:
        if isinstance(c, OSError) and c.strerror:
            return f"{what}: the API server {where} is unreachable ({c.strerror})"
    if isinstance(exc, (ValueError, UnicodeDecodeError)):
        text = " ".join(str(exc).split()) or exc.__class__.__name__
        return f"{what}: the API server {where} answered something that is not Kubernetes JSON ({text})"
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    if len(text) > 300:
        text = text[:300].rsplit(" ", 1)[0] + " …"
    return f"{what}: {exc.__class__.__name__}: {text}"


REFRESH_MARGIN = 0.5  # seconds: a token refresh ends this much before the command's deadline
CONFIG_TIMEOUT = (
    30.0  # seconds to load credentials (a kubeconfig read, an exec credential plugin) when no deadline is given
)


def api_client(
    kubeconfig: str | None = None, context: str | None = None, deadline: float | None = None, found: dict | None = None
):
    """(ApiClient, None) from --kubeconfig / $KUBECONFIG / ~/.kube/config, else in-cluster; (None, why) when none works.
    ``found``, when given, receives what the kubeconfig says besides credentials: ``namespace``, the namespace of the
    context used (kubectl's default namespace), when it sets one.

    Bounded: each kubeconfig is read with a size cap and a deadline (a FIFO or a terminal cannot hold it), and the
    credential loading (an exec plugin that never returns) ends at ``deadline`` — the plugin is stopped then."""
    from kubernetes import client, config

    deadline_of_command = deadline  # a token refresh mid-run is bounded by it too (None: CONFIG_TIMEOUT each)
    if deadline is None:
        deadline = time.monotonic() + CONFIG_TIMEOUT
    path = kubeconfig or os.environ.get("KUBECONFIG")
    default = os.path.expanduser("~/.kube/config")
    configuration = client.Configuration()
    private = _PrivateDir()  # the kubeconfig's decoded keys and certificates, while the TLS context is built
    try:
        return _api_client(
            client,
            config,
            configuration,
            private,
            (path, default, context),
            deadline,
            deadline_of_command,
            {} if found is None else found,
        )
    finally:
        private.remove()


def _api_client(client, config, configuration, private, where, deadline, deadline_of_command, found: dict):
    """api_client's work; ``private`` is where the client library writes the kubeconfig's decoded key files; ``where``
    (--kubeconfig or $KUBECONFIG, the default path, the context); ``found`` receives the exec credential plugin's
    command line and the context's namespace, once the kubeconfig names them."""
    from kubernetes.config.config_exception import ConfigException

    from .kubeapi import ApiDeadline, within

    path, default, context = where
    try:
        if path or os.path.exists(default):
            bad = _load_kubeconfig(config, configuration, private, path or default, context, deadline, found)
            if bad:
                return None, bad
        else:
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                return None, (
                    "no usable Kubernetes credentials: no --kubeconfig, $KUBECONFIG is unset, ~/.kube/config does not exist, "
                    "and this is not a pod (KUBERNETES_SERVICE_HOST is unset) — give --kubeconfig FILE, or run kpdiag "
                    "in a pod with a service account"
                )
            within(deadline, config.load_incluster_config, client_configuration=configuration)
        # no retries inside the client: urllib3 takes them when the ApiClient builds its connection pool (set on the
        # client afterwards they are ignored, and every timeout is tried 4 times); kpdiag retries what it means to
        # retry, within its own deadlines
        configuration.retries = 0
        bad = _credential_problem(configuration, path or default)
        if bad:
            return None, bad
        plugin_argv = found.get("plugin_argv")
        if plugin_argv and plugin_argv[0] and configuration.refresh_api_key_hook is not None:
            _bound_refresh(configuration, plugin_argv[0], deadline_of_command, names=plugin_names(plugin_argv))
        api = client.ApiClient(configuration=configuration)
        _tls_in_memory(api)
    except ApiDeadline:
        return None, "loading the in-cluster credentials did not finish in time"
    except (ConfigException, OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        text = " ".join(str(exc).split()) or exc.__class__.__name__
        if "Service token file does not exist" in text or "Service token file does not" in text:
            return None, (
                "in a pod, but no service-account token is mounted (automountServiceAccountToken: false?) — give "
                "--kubeconfig FILE, or run the pod with a service account"
            )
        plugin = (found.get("plugin_argv") or [None])[0]
        if text.startswith("exec: "):
            return None, f"kubeconfig {path or default}: the credential plugin {plugin!r} failed ({text[6:]})"
        where = f"kubeconfig {path or default}" if (path or os.path.exists(default)) else "in-cluster credentials"
        text = re.sub(r"\{.*\}", "{…}", text)  # the client quotes the whole user entry (its token, its key)
        return None, f"{where}: not usable ({secrets.scrub(text)})"
    return api, None


def _load_kubeconfig(config, configuration, private, given, context, deadline, found: dict) -> str | None:
    """Load ``given`` (one kubeconfig or several joined with ':') into ``configuration``, bounded by ``deadline``:
    None, or why not in one line. Its secrets are remembered (never shown), its exec plugin's command line goes into
    ``found``, key files go into the private directory."""
    from .kubeapi import ApiDeadline, within

    docs, bad = _read_kubeconfigs(given, deadline)
    if bad:
        return bad
    for _, doc in docs:
        secrets.remember_kubeconfig(doc)
    bad, plugin_argv = _context_problem(docs, context, given)
    found["plugin_argv"] = plugin_argv
    plugin = plugin_argv[0] if plugin_argv else None
    if bad:
        return bad
    namespace = context_namespace(docs, context)
    if namespace:
        found["namespace"] = namespace  # kubectl's default namespace: the context's
    regular = all(_regular(one) for one, _ in docs)
    before = _children()
    said = _Said()  # the client logs a failing credential plugin (and goes on without credentials)
    how = dict(context=context, client_configuration=configuration, persist_config=False, temp_file_path=private.path)
    try:
        if regular:
            within(deadline, config.load_kube_config, config_file=given, **how)
        else:  # a FIFO or /dev/fd/N: already read (once), hand the document over
            within(deadline, config.load_kube_config_from_dict, _merge(docs), **how)
    except ApiDeadline:
        _stop_children(before)
        left = "its credential plugin " + repr(plugin) if plugin else "loading the credentials"
        return (
            f"kubeconfig {given}: {left} did not finish in time — run it by hand to see what it waits for "
            "(a login prompt, a network call), or give a kubeconfig with a token"
        )
    finally:
        said.close()
    failed = next((m for m in said.messages if m.startswith("exec: ")), None)
    if failed:
        return (
            f"kubeconfig {given}: the credential plugin {plugin!r} failed ({' '.join(failed[6:].split())}) — "
            "run it by hand to see why (an expired login?)"
        )
    return None


class _PrivateDir:
    """Where the client library writes the key and certificate files it decodes from a kubeconfig
    (``client-key-data``): a directory only this user can enter, removed as soon as the TLS context holds them
    (:func:`_tls_in_memory`) and on every way out, signals included (kpdiag.secrets.private_dir)."""

    def __init__(self):
        self.path = secrets.private_dir()

    def remove(self) -> None:
        secrets.remove_private_dir(self.path)


def _credential_problem(configuration, given: str) -> str | None:
    """Why the loaded credentials cannot be sent, before any request is: a token or password with a control character
    (a YAML ``token: |`` block keeps the line's end) is not a valid header value. The value is never quoted."""
    for value in (configuration.api_key or {}).values():
        text = value if isinstance(value, str) else ""
        what = secrets.describe_control(text.split(" ", 1)[1] if text.startswith(("Bearer ", "Basic ")) else text)
        if what:
            kind = "password" if text.startswith("Basic ") else "token"
            return (
                f"kubeconfig {given}: the user's {kind} {what} — no request was sent (an HTTP header cannot carry it); "
                "a YAML 'token: |' block keeps the line's end: write 'token: VALUE' (or 'token: |-')"
            )
    return None


def _tls_in_memory(api) -> None:
    """Load the CA, client certificate and key into one SSL context the connection pool uses for every connection, so
    that the files the client library wrote can be removed at once (urllib3 would otherwise read them again on each
    new connection). TLS verification off (insecure-skip-tls-verify) is reported, not warned about on each request."""
    import ssl
    import warnings

    import urllib3
    from urllib3.util.ssl_ import create_urllib3_context

    conf = api.configuration
    kw = api.rest_client.pool_manager.connection_pool_kw
    if not conf.verify_ssl:
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if not str(conf.host or "").lower().startswith("https"):
        return
    ctx = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if conf.verify_ssl else ssl.CERT_NONE)
    if conf.verify_ssl:
        if conf.ssl_ca_cert:
            ctx.load_verify_locations(cafile=conf.ssl_ca_cert)
        elif not conf.ca_cert_data:
            ctx.load_default_certs()
    if conf.cert_file:
        ctx.load_cert_chain(conf.cert_file, conf.key_file)
    kw["ssl_context"] = ctx
    for key in ("ca_certs", "cert_file", "key_file"):
        kw[key] = None


KUBECONFIG_MAX = 1 << 20  # a kubeconfig is a few KB (tens with embedded certificates, of many clusters)


def _regular(path: str) -> bool:
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _read_capped(path: str, deadline: float) -> bytes:
    """At most KUBECONFIG_MAX + 1 bytes of ``path``, never past ``deadline``: opened non-blocking (a FIFO without a
    writer does not hold the open), then read as data arrives."""
    from kpdiag.bundle.safeio import read_until

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return read_until(fd, KUBECONFIG_MAX, deadline)
    finally:
        os.close(fd)


def _read_kubeconfigs(given: str, deadline: float) -> tuple[list[tuple[str, dict]], str | None]:
    """Each file of ``given`` (a path, or several joined with ':'), read bounded and checked; ([(path, doc)], None), or
    ([], why in one line) — before the client library fails on it with an unreadable error or hangs."""
    import yaml

    from kpdiag.parse.decode import TooDeep, load_yaml

    docs = []
    for one in given.split(os.pathsep):
        if not one:
            continue
        one = os.path.expanduser(one)
        if not os.path.exists(one) and given != one:
            continue  # as kubectl: a missing file in a $KUBECONFIG list is skipped
        try:
            data = _read_capped(one, deadline)
        except TimeoutError as exc:
            return [], f"kubeconfig {one}: not readable in time ({exc}; a FIFO or a terminal with no writer?)"
        except OSError as exc:
            return [], f"kubeconfig {one}: cannot read it ({exc.strerror or exc})"
        if len(data) > KUBECONFIG_MAX:
            return [], f"kubeconfig {one}: larger than {KUBECONFIG_MAX >> 20} MiB (kpdiag's cap): not a kubeconfig"
        try:
            doc = load_yaml(data.decode("utf-8", "replace"))  # depth- and alias-bounded
        except TooDeep as exc:
            return [], f"kubeconfig {one}: {exc}"
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            mark, start = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
            where = ""
            if mark is not None and start is not None and start.line < mark.line:  # an unclosed quote, bracket …
                where = f" (lines {start.line + 1}–{mark.line + 1}: {getattr(exc, 'context', None) or 'a value'})"
            elif mark is not None:
                where = f" (line {mark.line + 1})"
            return [], f"kubeconfig {one}: not valid YAML{where}"
        if not isinstance(doc, dict) or not any(k in doc for k in ("clusters", "contexts", "users", "current-context")):
            return [], (
                f"kubeconfig {one}: not a kubeconfig (expected a YAML mapping with clusters, contexts and users; "
                f"found {type(doc).__name__ if doc is not None else 'an empty file'})"
            )
        for key in ("clusters", "contexts", "users"):
            entries = doc.get(key)
            if entries is None:
                continue
            if not isinstance(entries, list):
                return [], f"kubeconfig {one}: {key} is {_kind(entries)}, not a list"
            for i, e in enumerate(entries):
                if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                    return [], f"kubeconfig {one}: {key}[{i}] has no name"
                inner = key[:-1]
                if e.get(inner) is not None and not isinstance(e.get(inner), dict):
                    return [], f"kubeconfig {one}: {key}[{i}].{inner} is {_kind(e.get(inner))}, not a mapping"
        docs.append((one, doc))
    if not docs:
        return [], f"kubeconfig {given}: no such file"
    return docs, None


def _kind(value) -> str:
    """json_type in a kubeconfig's (YAML) words: an object is a mapping."""
    from kpdiag.bundle.store import json_type

    t = json_type(value)
    return "a mapping" if t == "an object" else t


def _merge(docs: list[tuple[str, dict]]) -> dict:
    """Several kubeconfigs as one (kubectl's rule: the first file that names an entry, or sets a field, wins)."""
    out: dict = {"clusters": [], "contexts": [], "users": []}
    for _, doc in docs:
        for key in ("clusters", "contexts", "users"):
            have = {e["name"] for e in out[key]}
            out[key] += [e for e in doc.get(key) or [] if e["name"] not in have]
        if doc.get("current-context") and not out.get("current-context"):
            out["current-context"] = doc["current-context"]
    return out


def _context_problem(
    docs: list[tuple[str, dict]], context: str | None, given: str
) -> tuple[str | None, list[str] | None]:
    """(why the context cannot be used — the one asked for does not exist, and which do; or it names a cluster or
    user that is not there — or None; the exec credential plugin's command and arguments of its user, or None)."""
    merged = _merge(docs)
    names = [c["name"] for c in merged["contexts"]]
    have = ", ".join(repr(n) for n in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    wanted = context or merged.get("current-context")
    if not wanted:
        return (
            f"kubeconfig {given} sets no current-context and no --context was given"
            + (f" — pick one of its contexts: {have}" if names else " — it has no contexts")
        ), None
    ctx = next((c for c in merged["contexts"] if c["name"] == wanted), None)
    if ctx is None:
        if context:
            return (
                f"kubeconfig {given} has no context {context!r}"
                + (f" — its contexts: {have} (give one with --context)" if names else " — it has no contexts at all")
            ), None
        return f"kubeconfig {given}: its current-context {wanted!r} is not one of its contexts ({have or 'none'})", None
    body = ctx.get("context") or {}
    cluster_name, user_name = body.get("cluster"), body.get("user")
    cluster = next((c for c in merged["clusters"] if c["name"] == cluster_name), None)
    if cluster is None:
        return f"kubeconfig {given}: context {wanted!r} names cluster {cluster_name!r}, which it does not define", None
    server = (cluster.get("cluster") or {}).get("server")
    if not isinstance(server, str) or not server:
        return f"kubeconfig {given}: cluster {cluster_name!r} (context {wanted!r}) has no server address", None
    plugin = None
    if user_name:
        user = next((u for u in merged["users"] if u["name"] == user_name), None)
        if user is None:
            return f"kubeconfig {given}: context {wanted!r} names user {user_name!r}, which it does not define", None
        exec_ = (user.get("user") or {}).get("exec")
        if isinstance(exec_, dict):
            args = exec_.get("args") if isinstance(exec_.get("args"), list) else []
            plugin = [str(exec_.get("command") or "")] + [a for a in args if isinstance(a, str)][:32]
    return None, plugin


def context_namespace(docs: list[tuple[str, dict]], context: str | None) -> str | None:
    """The namespace the context in use sets (``contexts[].context.namespace``), as kubectl takes it when no
    --namespace is given; None when it sets none."""
    merged = _merge(docs)
    wanted = context or merged.get("current-context")
    ctx = next((c for c in merged["contexts"] if c["name"] == wanted), None)
    namespace = ((ctx or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


ENV_OPTIONS_WITH_VALUE = frozenset(("-u", "--unset", "-C", "--chdir", "-S", "--split-string"))


def plugin_names(argv: list[str]) -> set[str]:
    """The program names a running credential plugin can show in its command line: the command's, and when the command
    is ``env`` (``env [-i] [-u NAME] [VAR=value]… PROGRAM …``, which replaces itself by PROGRAM) the program's."""
    if not argv or not argv[0]:
        return set()
    names = {os.path.basename(argv[0])}
    if os.path.basename(argv[0]) != "env":
        return names
    rest = list(argv[1:])
    while rest:
        word = rest.pop(0)
        if word.startswith("--split-string="):  # the attached forms: --split-string=STRING, -SSTRING
            rest = word.split("=", 1)[1].split() + rest
        elif word.startswith("-S") and len(word) > 2:
            rest = word[2:].split() + rest
        elif word in ("-S", "--split-string") and rest:
            rest = rest.pop(0).split() + rest
        elif word in ENV_OPTIONS_WITH_VALUE:
            rest = rest[1:]
        elif word.startswith("-") or "=" in word:
            continue
        else:
            names.add(os.path.basename(word))
            break
    return names


class _Said:
    """Collects what the client logs on the root logger while credentials load (instead of Python's last-resort
    handler printing it to stderr)."""

    def __init__(self):
        import logging

        self.messages: list[str] = []
        outer = self

        class _H(logging.Handler):
            def emit(self, record):
                try:
                    outer.messages.append(str(record.getMessage()))
                except Exception:
                    pass

        self._handler = _H(logging.WARNING)
        logging.getLogger().addHandler(self._handler)

    def close(self) -> None:
        import logging

        logging.getLogger().removeHandler(self._handler)


def _children() -> set[int]:
    """The pids of this process's children now (from /proc)."""
    me, out = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().rsplit(b")", 1)[1].split()
                if int(stat[1]) == me:
                    out.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _bound_refresh(configuration, plugin: str, deadline: float | None, names: set[str] | None = None) -> None:
    """Bound the client's token refresh: when the exec plugin's token expires the client runs the plugin again, from
    inside whichever API call comes next, and waits for it without a timeout. Each refresh now ends before the
    deadline of the command or of the API call it runs in (at most CONFIG_TIMEOUT); a plugin still running then is
    killed with its children and the call fails with a plain line. One refresh at a time (kpdiag cluster's workers call in parallel)."""
    from .kubeapi import CredentialRefresh, call_deadline

    hook = configuration.refresh_api_key_hook
    lock = threading.Lock()

    def refresh(conf) -> None:
        now = time.monotonic()
        # ends a little before the deadline of the command or of the call it runs in (whichever comes first), so
        # that the call reports it (not a bare timeout) and nothing is left running
        ends = [d for d in (deadline, call_deadline()) if d is not None]
        left = (min(ends) - now - REFRESH_MARGIN) if ends else CONFIG_TIMEOUT
        bound = min(CONFIG_TIMEOUT, left)
        why = (
            f"the credential plugin {plugin!r} did not finish refreshing the token in {max(bound, 0):.0f} s and was "
            "stopped — run it by hand to see what it waits for (a login prompt, a network call)"
        )
        if bound <= 0 or not lock.acquire(timeout=bound):
            raise CredentialRefresh(why)
        try:
            before = _children()
            box: dict = {}
            said = _Said()  # the client logs a failing plugin (and goes on without credentials): kept, not printed

            def run() -> None:
                try:
                    hook(conf)
                except BaseException as exc:  # handed to the caller
                    box["error"] = exc
                finally:
                    said.close()

            worker = threading.Thread(target=run, name="kpdiag-credential-refresh", daemon=True)
            worker.start()
            worker.join(max(0.0, bound - (time.monotonic() - now)))
            if worker.is_alive():
                _stop_children(before, names=names or plugin_names([plugin]))
                raise CredentialRefresh(why)
            if "error" in box:
                raise box["error"]
            failed = next((m for m in said.messages if m.startswith("exec: ")), None)
            if failed:
                raise CredentialRefresh(
                    f"the credential plugin {plugin!r} failed when run again to refresh the token "
                    f"({' '.join(failed[6:].split())}) — run it by hand to see why (an expired login?)"
                )
        finally:
            lock.release()

    configuration.refresh_api_key_hook = refresh


def _stop_children(before: set[int], names: set[str] | None = None) -> None:
    """Stop the children started since ``before`` (a credential plugin the client started and still waits for) and
    whatever they started in turn. With ``names`` (:func:`plugin_names`), only the children running one of them (a
    name is one of the first words of the command line: argv[0], or a later one under a script's interpreter and its
    options): another thread's children (a node collector's commands) are left alone."""
    import signal

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    me = os.getpid()
    doomed = {pid for pid, ppid in parents.items() if ppid == me and pid not in before}
    if names:
        doomed = {pid for pid in doomed if names & {os.path.basename(a) for a in _argv(pid)[:8]}}
    grown = True
    while grown:
        more = {pid for pid, ppid in parents.items() if ppid in doomed and pid not in doomed}
        doomed |= more
        grown = bool(more)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read(4096).split(b"\0") if a]
    except OSError:
        return []


API_BUDGET = 60.0  # seconds for every API call of one command (svc, node, policy) together, credentials included


def api_budget() -> float:
    """The API budget of one command: $KPDIAG_API_BUDGET seconds (1 to 3600) when set, else API_BUDGET."""
    try:
        value = float(os.environ.get("KPDIAG_API_BUDGET") or API_BUDGET)
    except ValueError:
        return API_BUDGET
    return min(3600.0, max(1.0, value)) if value == value else API_BUDGET


class ClusterCollector:
    """The API reads of one command, all within one wall-clock ``deadline`` (a monotonic time; by default ``budget``
    seconds from now): each call gets ``timeout`` (less when the deadline is nearer), its answer is read with a byte cap
    and checked for the shape kpdiag reads (kpdiag.state.cluster.object_problem) before anything uses it."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout: float = API_TIMEOUT,
        deadline: float | None = None,
        budget: float | None = None,
    ):
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout
        self.budget = budget if budget is not None else api_budget()
        self._fixed = deadline is not None
        self.deadline = deadline if deadline is not None else time.monotonic() + self.budget
        self.out = ClusterData()
        self._api = None
        self.config_error: str | None = None
        self.service_status: int | None = None  # HTTP status of the Service GET (200, 404, 403 …); 0 = unreachable
        self.service_error: str | None = None
        self.context_namespace: str | None = None  # the kubeconfig context's namespace, when it sets one
        # one credential load and one GET of a Service however many threads ask (`kpdiag node --service` in IPVS
        # mode: the focused rules read needs the Service while service_view reads it ahead)
        self._once = threading.Lock()
        self._services: dict[tuple[str, str], dict | None] = {}

    def _err(self, source: str, error: str) -> None:
        self.out.errors.append({"source": source, "error": error})

    def connect(self) -> bool:
        """Load credentials: --kubeconfig / KUBECONFIG / ~/.kube/config, else in-cluster; False with a reason. Loaded
        once: a second call answers as the first did."""
        with self._once:
            if self._api is not None or self.config_error is not None:
                return self._api is not None
            return self._connect()

    def _connect(self) -> bool:
        if not self._fixed:  # the budget runs from when the client library is loaded (an import waits on no one)
            import kubernetes.client  # noqa: F401
            import kubernetes.config  # noqa: F401

            self.deadline = time.monotonic() + self.budget
            self._fixed = True
        found: dict = {}
        api, why = api_client(self.kubeconfig, self.context, deadline=self.deadline, found=found)
        self.context_namespace = found.get("namespace")
        if api is None:
            self.config_error = why
            self._err("cluster", why)
            return False
        self._api = api
        self.out.api = secrets.shown_url(api.configuration.host)
        if not api.configuration.verify_ssl and str(api.configuration.host or "").lower().startswith("https"):
            self._err(
                sources.SERVICES,
                f"TLS verification is off for the API server {self.out.api} (insecure-skip-tls-verify in the "
                "kubeconfig): its certificate was not checked, yet kpdiag's credentials were sent to it — anyone on "
                "the path could have answered and kept them; set certificate-authority(-data) instead",
            )
        return True

    def _timeouts(self) -> tuple[float, float]:
        from .kubeapi import ApiDeadline

        left = self.deadline - time.monotonic()
        if left <= 0.05:
            raise ApiDeadline(f"the {self.budget:.0f} s given to the API were used up before this call")
        t = min(self.timeout, left)
        return (t, t)

    def _fetch(self, fn, args, kwargs):
        """One call for raw JSON: the body read in chunks (capped, bounded by the deadline), then decoded."""
        from .kubeapi import read_body, within

        def go():
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeouts(), **kwargs)
            return load_json(
                read_body(resp, self.deadline)
            )  # depth-bounded too: anyone who may create objects wrote them

        return within(self.deadline, go)

    def _call(self, source: str, what: str, fn, *args, kind: str | None = None, **kwargs):
        """Call an API method for raw JSON; None (with a recorded reason) on any failure. ``kind``: the answer must be a
        List of that kind (a dict whose ``items`` is a list; objects of the wrong shape are left out, each named) or,
        with "one:" before it, one such object."""
        try:
            doc = self._fetch(fn, args, kwargs)
        except Exception as exc:  # ApiException, urllib3 errors, JSON errors, a cap: all become a reason
            self._err(source, api_reason(exc, what, self.out.api))
            return None
        return self._shaped(source, what, doc, kind)

    def _shaped(self, source: str, what: str, doc, kind: str | None):
        from kpdiag.state.shapes import object_problem, read_list

        if kind is None:  # any JSON object
            if not isinstance(doc, dict):
                self._err(source, f"{what}: the API's answer is malformed: it is not an object")
                return None
            return doc
        if kind.startswith("one:"):
            bad = object_problem(doc, kind[4:])
            if bad:
                self._err(source, f"{what}: the API's answer is malformed: {bad}")
                return None
            return doc
        good, problems = read_list(doc, kind)
        if good is None:
            self._err(source, f"{what}: the API's answer is malformed: {problems[0]}")
            return None
        for line in problems:
            self._err(source, f"{what}: {line}")
        return dict(doc, items=good)

    def _get_service(self, api, namespace: str, name: str) -> dict | None:
        """The Service, GET once per collector (a second caller, in any thread, waits for the first one's answer)."""
        with self._once:
            if (namespace, name) not in self._services:
                self._services[(namespace, name)] = self._read_service(api, namespace, name)
            return self._services[(namespace, name)]

    def _read_service(self, api, namespace: str, name: str) -> dict | None:
        try:
            doc = self._fetch(api.read_namespaced_service, (name, namespace), {})
            self.service_status = 200
        except Exception as exc:
            self.service_status = int(getattr(exc, "status", 0) or 0)
            self.service_error = api_reason(exc, f"get service {namespace}/{name}", self.out.api)
            if self.service_status != 404:
                self._err(sources.SERVICES, self.service_error)
            return None
        doc = self._shaped(sources.SERVICES, f"get service {namespace}/{name}", doc, "one:Service")
        if doc is None:
            self.service_status = 0
            self.service_error = self.out.errors[-1]["error"]
        return doc

    def one_service(self, namespace: str, name: str) -> tuple[dict | None, str]:
        """The Service object alone (what a focused read of IPVS rules needs), or (None, why not)."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None, self.config_error or "no API credentials"
        doc = self._get_service(RawApi(self._api), namespace, name)
        if doc is None:
            return None, self.service_error or "no such Service"
        return doc, ""

    def _lookup(self, api, namespace: str, name: str) -> None:
        """The Service is not there: which names are (nearest in the namespace, the same name elsewhere) —
        cluster/service-lookup.json, read by KP110."""
        doc = {
            "namespace": namespace,
            "name": name,
            "found": False,
            "status": 404,
            "listed": False,
            "names_in_namespace": [],
            "same_name_in": [],
        }
        listed = self._call(
            SERVICE_LOOKUP,
            f"list services in {namespace}",
            api.list_namespaced_service,
            namespace,
            limit=2000,
            kind="Service",
        )
        if listed is not None:
            doc["listed"] = True
            doc["names_in_namespace"] = sorted(
                {str((i.get("metadata") or {}).get("name")) for i in listed.get("items") or [] if isinstance(i, dict)}
            )
        elsewhere = self._call(
            SERVICE_LOOKUP,
            "list services in all namespaces",
            api.list_service_for_all_namespaces,
            field_selector=f"metadata.name={name}",
            limit=200,
            kind="Service",
        )
        if elsewhere is not None:
            doc["same_name_in"] = sorted(
                {
                    str((i.get("metadata") or {}).get("namespace"))
                    for i in elsewhere.get("items") or []
                    if isinstance(i, dict)
                    and (i.get("metadata") or {}).get("name") == name
                    and (i.get("metadata") or {}).get("namespace") != namespace
                }
            )
        self.out.files[SERVICE_LOOKUP] = json.dumps(doc, indent=1).encode()

    def service(self, namespace: str, name: str, node_name: str | None = None) -> dict | None:
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None
        api = RawApi(self._api)
        svc = self._get_service(api, namespace, name)
        if svc is not None:
            self.out.files[sources.SERVICES] = _as_list("Service", [svc])
            self.out.files[SERVICE_LOOKUP] = json.dumps(
                {"namespace": namespace, "name": name, "found": True, "status": 200}, indent=1
            ).encode()
        elif self.service_status == 404:
            self._lookup(api, namespace, name)
            return None
        else:
            return None  # the API cannot be used: no point in asking it more
        self._service_slices(api, namespace, name)
        selector = ((svc or {}).get("spec") or {}).get("selector")
        if selector:
            label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods = self._call(
                sources.PODS,
                f"list pods in {namespace}",
                api.list_namespaced_pod,
                namespace,
                label_selector=label_selector,
                kind="Pod",
            )
            if pods is not None:
                items = pods.get("items", [])
                picked = [p for p in items if selector_matches(selector, p.get("metadata", {}).get("labels"))]
                # near misses help explain a selector that matches nothing: pods sharing at least one label
                if not picked:
                    everyone = self._call(
                        sources.PODS,
                        f"list pods in {namespace}",
                        api.list_namespaced_pod,
                        namespace,
                        limit=500,
                        kind="Pod",
                    )
                    items = (everyone or {}).get("items", [])
                    picked = [p for p in items if set((p.get("metadata", {}).get("labels") or {})) & set(selector)]
                self.out.files[sources.PODS] = _as_list("Pod", picked)
        node_name = node_name or os.environ.get("NODE_NAME") or os.environ.get("KUBERNETES_NODE_NAME")
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        cm = self._call(
            sources.KP_CONFIGMAP,
            "get configmap kube-system/kube-proxy",
            api.read_namespaced_config_map,
            "kube-proxy",
            "kube-system",
            kind="one:ConfigMap",
        )
        if cm is not None:
            self.out.files[sources.KP_CONFIGMAP] = json.dumps(cm, indent=1).encode()
        ds = self._call(
            sources.KP_DAEMONSET,
            "get daemonset kube-system/kube-proxy",
            api.read_namespaced_daemon_set,
            "kube-proxy",
            "kube-system",
            kind="one:DaemonSet",
        )
        if ds is not None:
            self.out.files[sources.KP_DAEMONSET] = json.dumps(ds, indent=1).encode()
        ver = self._call(sources.VERSION, "get /version", api.get_code, kind="one:Version")
        if ver is not None:
            self.out.files[sources.VERSION] = json.dumps(ver, indent=1).encode()
        return svc

    POD_BY_IP_LIMIT = 20

    def pods_with_ip(self, ip: str, namespace: str | None = None) -> tuple[list[dict] | None, int | None, str | None]:
        """The pods whose status.podIP is ``ip``, in all namespaces or in ``namespace`` (one list call, fieldSelector,
        at most POD_BY_IP_LIMIT): (pods, None, None), or (None, HTTP status or None, why) when the API refused or
        failed. Only pods that really carry the address are returned, whatever the server did with the selector."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return None, None, self.config_error or "the Kubernetes API is not configured"
        where = f"namespace {namespace}" if namespace else "all namespaces"
        what = f"list pods in {where} with status.podIP={ip}"
        api = RawApi(self._api)
        call = (lambda **kw: api.list_namespaced_pod(namespace, **kw)) if namespace else api.list_pod_for_all_namespaces
        try:  # bounded like every read (deadline, body cap), then judged for shape
            doc = self._fetch(call, (), {"field_selector": f"status.podIP={ip}", "limit": self.POD_BY_IP_LIMIT})
        except Exception as exc:
            return None, int(getattr(exc, "status", 0) or 0) or None, api_reason(exc, what, self.out.api)
        from kpdiag.state.shapes import read_list

        items, problems = read_list(doc, "Pod")
        if items is None:
            return None, None, f"{what}: the API's answer is malformed: {problems[0]}"
        out = []
        for pod in items:
            st = pod.get("status") if isinstance(pod, dict) and isinstance(pod.get("status"), dict) else {}
            ips = {p.get("ip") for p in st.get("podIPs") or [] if isinstance(p, dict)} | {st.get("podIP")}
            if ip in ips and st.get("phase") not in ("Succeeded", "Failed"):
                pod.setdefault("kind", "Pod")
                out.append(pod)
        return out, None, None

    def policy_objects(self, namespaces, client_pod: tuple[str, str] | None = None, dns: bool = True) -> bool:
        """What NetworkPolicy evaluation needs, for the ``namespaces`` given (the Service's, the client's):

        - ``cluster/namespaces.json``: every namespace (their labels, for namespaceSelector);
        - ``cluster/networkpolicies.json``: the NetworkPolicies of those namespaces (and kube-system with ``dns``);
          its List metadata ``namespaces`` says which were listed — only written when every list succeeded, so a
          namespace whose policies could not be read is never taken as one without policies;
        - ``cluster/cni.json``: the DaemonSets of kube-system (and up to 20 pods of the kube-flannel and calico-system
          namespaces when they exist) reduced to names, owners, images and two flags (kpdiag.state.netpol.component), to
          tell whether the CNI enforces NetworkPolicy;
        - ``cluster/client-pod.json``: the client pod ``(namespace, name)`` when given.
        With ``dns``, kube-system's policies are listed too (they may stop the client's DNS at the CoreDNS pods); the
        DNS Service and pods themselves come from :meth:`dns_objects` (cluster/dns-service.json, dns-pods.json).
        Every failure is a recorded reason; False when nothing could be asked."""
        from .cni import collect_cni
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        nss = self._call(sources.NAMESPACES, "list namespaces", api.list_namespace, kind="Namespace")
        existing = None
        if nss is not None:
            items = nss.get("items", [])
            existing = {(n.get("metadata") or {}).get("name") for n in items}
            self.out.files[sources.NAMESPACES] = _as_list("Namespace", items)
        wanted = sorted({n for n in namespaces if n} | ({"kube-system"} if dns else set()))
        policies, complete = [], True
        for ns in wanted:
            doc = self._call(
                sources.NETWORKPOLICIES,
                f"list networkpolicies in {ns}",
                api.list_namespaced_network_policy,
                ns,
                kind="NetworkPolicy",
            )
            if doc is None:
                complete = False
                continue
            policies += [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("namespace", ns) == ns]
        if complete:
            self.out.files[sources.NETWORKPOLICIES] = json.dumps(
                {"apiVersion": "v1", "kind": "List", "metadata": {"namespaces": wanted}, "items": policies}, indent=1
            ).encode()
        collect_cni(self, api, existing)  # cluster/cni.json (kpdiag/collect/cni.py)
        if client_pod:
            ns, name = client_pod
            doc = self._call(
                sources.CLIENT_POD,
                f"list pods in {ns}",
                api.list_namespaced_pod,
                ns,
                field_selector=f"metadata.name={name}",
                kind="Pod",
            )
            if doc is not None:
                mine = [p for p in doc.get("items", []) if (p.get("metadata") or {}).get("name") == name]
                for p in mine:
                    p.setdefault("kind", "Pod")
                self.out.files[sources.CLIENT_POD] = _as_list("Pod", mine)
        return True

    DNS_LOG_TAIL_LINES = 200
    DNS_LOG_LIMIT_BYTES = 64 * 1024
    DNS_LOG_PODS = 4

    def dns_objects(self) -> None:
        """The cluster DNS as the API shows it, in kube-system: the Service labelled k8s-app=kube-dns (else the one named
        kube-dns or coredns) → cluster/dns-service.json, its EndpointSlices → cluster/dns-endpointslices.json, the
        CoreDNS pods (k8s-app=kube-dns) → cluster/dns-pods.json (Lists), and the last 200 lines (at most 64 KiB) of
        the log of up to 4 of those pods — also the previous container's of a pod that restarted — as
        cluster/dns-logs.json: {"logs": [{"namespace", "pod", "container", "previous", "text" | "error", "truncated"}]}."""
        from .kubeapi import RawApi, within

        if self._api is None and not self.connect():
            return
        ns, label = "kube-system", "k8s-app=kube-dns"
        api = RawApi(self._api)
        mark = len(self.out.errors)
        svcs = self._call(
            sources.DNS_SERVICE,
            "list services in kube-system",
            api.list_namespaced_service,
            ns,
            label_selector=label,
            kind="Service",
        )
        picked = [
            s
            for s in (svcs or {}).get("items", [])
            if (s.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        if not picked:  # unlabelled, or RBAC allows get but not list (deploy/rbac-svc.yaml): by its usual names
            for name in ("kube-dns", "coredns"):
                got = self._call(
                    sources.DNS_SERVICE,
                    f"get service kube-system/{name}",
                    api.read_namespaced_service,
                    name,
                    ns,
                    kind="one:Service",
                )
                if got is not None:
                    picked = [got]
                    del self.out.errors[mark:]  # found: the misses before are no failure
                    break
        if svcs is not None or picked:  # known: this Service, or (the list answered) none
            self.out.files[sources.DNS_SERVICE] = _as_list("Service", picked[:1])
        if picked:
            self._service_slices(api, ns, picked[0]["metadata"]["name"], sources.DNS_ENDPOINTSLICES)
        pods = self._call(
            sources.DNS_PODS, "list pods in kube-system", api.list_namespaced_pod, ns, label_selector=label, kind="Pod"
        )
        if pods is None:
            return
        dns_pods = [
            p for p in pods.get("items", []) if (p.get("metadata", {}).get("labels") or {}).get("k8s-app") == "kube-dns"
        ]
        self.out.files[sources.DNS_PODS] = _as_list("Pod", dns_pods)
        logs = []
        for pod in dns_pods[: self.DNS_LOG_PODS]:
            pname = pod["metadata"]["name"]
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
            container = "coredns" if "coredns" in containers else (containers[0] if containers else None)
            restarted = any(s.get("name") == container and (s.get("restartCount") or 0) > 0 for s in statuses)
            for previous in (False, True) if restarted else (False,):
                entry = {"namespace": ns, "pod": pname, "container": container, "previous": previous}
                try:
                    data = within(self.deadline, self._log, api, pname, ns, container, previous)
                    entry["truncated"] = len(data) > self.DNS_LOG_LIMIT_BYTES
                    lines = data[: self.DNS_LOG_LIMIT_BYTES].decode("utf-8", "replace").splitlines()
                    entry["text"] = "\n".join(lines[-self.DNS_LOG_TAIL_LINES :])
                except Exception as exc:  # RBAC (pods/log), a container not started: a reason, the rest goes on
                    entry["error"] = api_reason(
                        exc, f"get pods/log kube-system/{pname}{' (previous)' if previous else ''}", self.out.api
                    )
                logs.append(entry)
        self.out.files[sources.DNS_LOGS] = json.dumps({"logs": logs}, indent=1).encode()

    def _log(self, api, pod: str, ns: str, container, previous: bool) -> bytes:
        """At most DNS_LOG_LIMIT_BYTES + 1 bytes of a pod's log (the server is asked for the limit, and not trusted)."""
        from .kubeapi import read_body

        resp = api.read_namespaced_pod_log(
            pod,
            ns,
            container=container,
            tail_lines=self.DNS_LOG_TAIL_LINES,
            limit_bytes=self.DNS_LOG_LIMIT_BYTES,
            previous=previous or None,
            _preload_content=False,
            _request_timeout=self._timeouts(),
        )
        return read_body(resp, self.deadline, limit=self.DNS_LOG_LIMIT_BYTES, truncate=True)

    def node_view(self, node_name: str | None, page: int = 500) -> bool:
        """What `kpdiag node` compares its rules with: every Service and EndpointSlice (paged lists, raw JSON) and this
        node's Node object (its zone). False, with a recorded reason, when the API cannot be used."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        services = self._paged(
            sources.SERVICES, "list services in all namespaces", api.list_service_for_all_namespaces, page, "Service"
        )
        if services is None:
            return False
        self.out.files[sources.SERVICES] = _as_list("Service", services)
        slices = self._paged(
            sources.ENDPOINTSLICES,
            "list endpointslices in all namespaces",
            api.list_endpoint_slice_for_all_namespaces,
            page,
            "EndpointSlice",
        )
        if slices is not None:
            self.out.files[sources.ENDPOINTSLICES] = _as_list("EndpointSlice", slices)
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        return True

    # what a focused `kpdiag node --service` holds of the API (the manifest's partial "holds"), by source
    SERVICE_VIEW_HOLDS = {
        sources.SERVICES: "only {svc} (get service): not every Service of the cluster",
        sources.ENDPOINTSLICES: "only {svc}'s EndpointSlices (list endpointslices in {ns}, labelSelector "
        "kubernetes.io/service-name={name})",
    }

    def service_view(self, namespace: str, name: str, node_name: str | None) -> bool:
        """What `kpdiag node --service NS/NAME` compares that Service's rules with: the Service (one GET), its
        EndpointSlices (one list in its namespace by label) and this node's Node object (its zone) — never the whole
        cluster's lists. A Service the API does not have is looked up by name (kpdiag svc's KP110 lookup: the
        namespace's Service names, the same name elsewhere). False, with a recorded reason, when the API cannot be
        used."""
        from .kubeapi import RawApi

        if self._api is None and not self.connect():
            return False
        api = RawApi(self._api)
        svc = self._get_service(api, namespace, name)
        if svc is None and self.service_status != 404:
            return False
        self.out.files[sources.SERVICES] = _as_list("Service", [svc] if svc is not None else [])
        if svc is None:
            self._lookup(api, namespace, name)
        else:
            self.out.files[SERVICE_LOOKUP] = json.dumps(
                {"namespace": namespace, "name": name, "found": True, "status": 200}, indent=1
            ).encode()
        self._service_slices(api, namespace, name)
        if node_name:
            node = self._call(sources.NODES, f"get node {node_name}", api.read_node, node_name, kind="one:Node")
            if node is not None:
                self.out.files[sources.NODES] = _as_list("Node", [node])
        return True

    def _service_slices(self, api, namespace: str, name: str, source: str = sources.ENDPOINTSLICES) -> None:
        """The Service's EndpointSlices (listed by the label ``kubernetes.io/service-name``) → ``source``
        (cluster/endpointslices.json; the DNS Service's: cluster/dns-endpointslices.json); what the server sent is
        checked again: kpdiag never trusts a server's filtering."""
        slices = self._call(
            source,
            f"list endpointslices in {namespace}",
            api.list_namespaced_endpoint_slice,
            namespace,
            label_selector=f"kubernetes.io/service-name={name}",
            kind="EndpointSlice",
        )
        if slices is not None:
            mine = [
                s
                for s in slices.get("items", [])
                if (s.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name") == name
            ]
            self.out.files[source] = _as_list("EndpointSlice", mine)

    def _paged(self, source: str, what: str, fn, page: int, kind: str | None = None) -> list | None:
        """Every object of a paged List, or None (with the reason recorded) — never part of it: an incomplete list of
        Services would make every Service it left out look missing. Capped in pages and objects (kpdiag.collect.
        kubeapi.MAX_PAGES, MAX_OBJECTS), and a continue token that comes back is a loop."""
        from .kubeapi import MAX_OBJECTS, MAX_PAGES

        items: list = []
        token, seen = None, set()
        for pages in range(1, MAX_PAGES + 1):
            kwargs = {"limit": page}
            if token:
                kwargs["_continue"] = token
            doc = self._call(source, what, fn, kind=kind, **kwargs)
            if doc is None:
                return None
            items.extend(doc["items"])
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return items
            if len(items) > MAX_OBJECTS:
                self._err(
                    source,
                    f"{what}: more than {MAX_OBJECTS} objects (kpdiag's cap on one list): stopped after {pages} pages, "
                    "not used (an incomplete list would be read as missing objects)",
                )
                return None
            if token in seen:
                self._err(
                    source,
                    f"{what}: the API server sent the same continue token again after {pages} pages (a paging loop): "
                    "stopped, not used",
                )
                return None
            seen.add(token)
        self._err(
            source,
            f"{what}: still more after {MAX_PAGES} pages of {page} (kpdiag's cap on pages of one list): stopped, not used",
        )
        return None
