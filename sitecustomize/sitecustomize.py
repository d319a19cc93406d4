"""Apply the kit's active profile environment at interpreter start-up (stdlib only).

Every Python process in the server container (the SGLang launcher and each tensor-parallel worker)
starts with this directory on PYTHONPATH, so all of them see the same NCCL/SGLang environment.
Reads $KIT_PROFILE_ENV (JSON), else $KIT_STATE_DIR/profile.env (NUL-separated NAME=value, no imports),
else $KIT_STATE_DIR/profile.json. All or nothing; never raises.

The names below are the settings registry's (launcher/settings.py); a test pins them to it, since
this file may import nothing of the kit.
"""

_KIT_PROFILE_ENV = "KIT_PROFILE_ENV"
_KIT_STATE_DIR = "KIT_STATE_DIR"
_KIT_ACTIVE_PROFILE = "KIT_ACTIVE_PROFILE"
_KIT_ACTIVE_SPEC = "KIT_ACTIVE_SPEC"
_PROFILE_ENV_FILE = "profile.env"
_PROFILE_JSON = "profile.json"


def _kit_apply():
    import os
    import sys

    path = os.environ.get(_KIT_PROFILE_ENV)
    if not path:
        state = os.environ.get(_KIT_STATE_DIR)
        if not state:
            return
        if _kit_apply_env_file(os.path.join(state, _PROFILE_ENV_FILE)):
            return
        path = os.path.join(state, _PROFILE_JSON)
    try:
        import json

        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return
    except Exception as exc:  # malformed or unreadable: say so once, apply nothing
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: {exc.__class__.__name__}: {exc}\n")
        return
    env = data.get("env") if isinstance(data, dict) else None
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(env, dict) or not isinstance(name, str) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: expected {{'name': str, 'env': {{str: str}}}}\n")
        return
    os.environ.update(env)
    os.environ[_KIT_ACTIVE_PROFILE] = name
    spec = data.get("spec")
    if isinstance(spec, str):
        os.environ[_KIT_ACTIVE_SPEC] = spec


def _kit_apply_env_file(path):
    """The fast path: NUL-separated NAME=value entries, no imports. False when the file is absent."""
    import os
    import sys

    try:
        with open(path, encoding="utf-8") as fh:
            entries = [e.partition("=") for e in fh.read().split("\0") if e]
    except FileNotFoundError:
        return False
    except Exception as exc:
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: {exc.__class__.__name__}: {exc}\n")
        return True
    if not entries or any(not sep or not key for key, sep, _ in entries):
        sys.stderr.write(f"kit sitecustomize: ignoring {path}: expected NUL-separated NAME=value entries\n")
        return True
    for key, _, value in entries:
        os.environ[key] = value
    return True


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
