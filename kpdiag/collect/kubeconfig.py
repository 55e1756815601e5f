"""Kubernetes credentials for the API reads: --kubeconfig / $KUBECONFIG / ~/.kube/config (each file read once, capped
and bounded in time, checked before the client library sees it), else the pod's service account — loaded through the
official client within a deadline, the decoded key material kept in a private directory only while the TLS context is
built, TLS verification off told, a token that cannot be sent refused before any request."""

from __future__ import annotations

import os
import re
import time

from kpdiag import secrets

from .credplugin import CONFIG_TIMEOUT, Said, bound_refresh, children, in_own_session, plugin_names, stop_children


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
    # the credentials load within CONFIG_TIMEOUT, or the command's deadline if sooner: a plugin that never exits
    # does not take the whole budget of the API
    deadline = min(d for d in (deadline, time.monotonic() + CONFIG_TIMEOUT) if d is not None)
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
            bad = _load_kubeconfig(configuration, private, path or default, context, deadline, found)
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
            bound_refresh(configuration, plugin_argv[0], deadline_of_command, names=plugin_names(plugin_argv))
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


def _load_kubeconfig(configuration, private, given, context, deadline, found: dict) -> str | None:
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
    before, started = children(), time.monotonic()
    said = Said()  # the client logs a failing credential plugin (and goes on without credentials)
    try:
        within(deadline, _load_into, docs, context, configuration, private.path)
    except ApiDeadline:
        stop_children(before)
        left = "its credential plugin " + repr(plugin) if plugin else "loading the credentials"
        return (
            f"kubeconfig {given}: {left} did not finish in time ({time.monotonic() - started:.0f} s; stopped, with "
            "what it started) — run it by hand to see what it waits for (a login prompt, a network call), or give a "
            "kubeconfig with a token"
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


def _load_into(docs: list[tuple[str, dict]], context: str | None, configuration, temp_file_path: str) -> None:
    """The client library's loader over the kubeconfigs already read (each file once, bounded), as its own
    ``load_kube_config`` would merge them: each entry keeps the path of its file (relative certificate paths and the
    credential plugin's working directory are that file's directory; a FIFO's, the working directory), and each
    user's exec credential plugin starts in a session of its own (:func:`in_own_session`)."""
    from kubernetes.config.kube_config import ConfigNode, KubeConfigLoader

    merged: dict = {"clusters": [], "contexts": [], "users": []}
    for one, doc in docs:
        path = one if _regular(one) else None
        for key in ("clusters", "contexts", "users"):
            have = {e.value["name"] for e in merged[key]}
            for entry in doc.get(key) or []:
                if entry["name"] not in have:
                    entry = in_own_session(entry) if key == "users" else entry
                    merged[key].append(ConfigNode(f"{one}/{entry['name']}", entry, path))
        if doc.get("current-context") and not merged.get("current-context"):
            merged["current-context"] = doc["current-context"]
    first = docs[0][0] if _regular(docs[0][0]) else None
    loader = KubeConfigLoader(
        config_dict=ConfigNode(first or "kube-config", merged, first),
        active_context=context,
        config_base_path=None,
        temp_file_path=temp_file_path,
    )
    loader.load_and_set(configuration)


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
            args = exec_["args"] if isinstance(exec_.get("args"), list) else []
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
