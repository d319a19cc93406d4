"""Apply the kit's active profile environment at interpreter start-up (stdlib only).

Every Python process of the server program (the SGLang launcher and each tensor-parallel worker)
starts with this directory on PYTHONPATH and KIT_PROFILE_ENV naming the rendered plan's env file, so
all of them see the same NCCL/SGLang environment. Only the server program's environment names that
file: supervisord, the control API and the log tailer never apply a profile.

$KIT_PROFILE_ENV is NUL-separated NAME=value entries (the state dir's profile.env, read without
imports), or a plan JSON when the name ends in .json. Only a regular file of at most 1 MiB is read,
without blocking (a FIFO is refused, not waited on). All or nothing; never raises.

The names below are the settings registry's (launcher/settings.py); a test pins them to it, since
this file may import nothing of the kit. Likewise _MAX_BYTES is launcher/profiles/env_file.py's MAX_BYTES,
which the `env_file_size` rule checks every plan against (tests/launcher/profiles/test_env_file.py pins the two equal), so a
plan whose env this file would ignore is refused by `launcher check`, /check and /switch instead.
"""

_KIT_PROFILE_ENV = "KIT_PROFILE_ENV"
_KIT_ACTIVE_PROFILE = "KIT_ACTIVE_PROFILE"
_KIT_ACTIVE_SPEC = "KIT_ACTIVE_SPEC"
_MAX_BYTES = 1 << 20  # = launcher.profiles.env_file.MAX_BYTES (pinned by a test)


def _kit_read(path):
    """The file's text: a regular file, opened without blocking, at most _MAX_BYTES."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        if st.st_size > _MAX_BYTES:
            raise OSError(f"larger than {_MAX_BYTES} bytes")
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8")


def _kit_apply():
    import os
    import sys

    path = os.environ.get(_KIT_PROFILE_ENV)
    if not path:
        return
    try:
        text = _kit_read(path)
    except FileNotFoundError:
        return
    except Exception as exc:  # unreadable, not a file, too big: say so once, apply nothing
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: {exc.__class__.__name__}: {exc}\n")
        return
    env = _kit_env_json(text) if path.endswith(".json") else _kit_env_entries(text)
    if isinstance(env, str):
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: {env}\n")
        return
    os.environ.update(env)


def _kit_valid(key, value):
    return key.isidentifier() and key.isascii() and "\0" not in value and "\n" not in value and "\r" not in value


def _kit_env_entries(text):
    """NUL-separated NAME=value entries; a string says what is wrong."""
    entries = [e.partition("=") for e in text.split("\0") if e]
    if not entries or any(not sep or not _kit_valid(key, value) for key, sep, value in entries):
        return "expected NUL-separated NAME=value entries"
    return {key: value for key, _, value in entries}


def _kit_env_json(text):
    """A plan JSON's env plus its name and spec; a string says what is wrong."""
    import json

    try:
        data = json.loads(text)
    except ValueError as exc:
        return f"{exc.__class__.__name__}: {exc}"
    env = data.get("env") if isinstance(data, dict) else None
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(env, dict) or not isinstance(name, str) or not all(
        isinstance(k, str) and isinstance(v, str) and _kit_valid(k, v) for k, v in env.items()
    ):
        return "expected {'name': str, 'env': {str: str}}"
    out = dict(env)
    out[_KIT_ACTIVE_PROFILE] = name
    spec = data.get("spec")
    if isinstance(spec, str):
        out[_KIT_ACTIVE_SPEC] = spec
    return out


def _kit_chain():
    """Run the sitecustomize this one shadows (Ubuntu's python ships one), if any."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        for candidate in (os.path.join(entry, "sitecustomize.py"), os.path.join(entry, "sitecustomize", "__init__.py")):
            if os.path.isfile(candidate) and os.path.abspath(candidate) != os.path.abspath(__file__):
                import importlib.util

                try:
                    spec = importlib.util.spec_from_file_location("_kit_shadowed_sitecustomize", candidate)
                    module = importlib.util.module_from_spec(spec)
                    sys.modules["_kit_shadowed_sitecustomize"] = module
                    spec.loader.exec_module(module)
                except Exception as exc:
                    sys.stderr.write(f"kit sitecustomize: chained {candidate} failed: {exc}\n")
                return


try:
    _kit_apply()
except Exception:  # never stop an interpreter from starting
    pass
try:
    _kit_chain()
except Exception:
    pass
