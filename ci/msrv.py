"""Checks Cargo.toml's `rust-version` against the locked dependencies: it must be the highest
`rust-version` any package in Cargo.lock declares (the oldest Rust that can build the lockfile).
Run after `cargo fetch`, which puts every locked package's Cargo.toml in cargo's registry cache."""
import glob
import os
import sys
import tomllib


def version(text):
    """`1.88` and `1.88.0` compare equal."""
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    claimed = tomllib.load(open("Cargo.toml", "rb"))["package"]["rust-version"]
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    registries = glob.glob(os.path.join(home, "registry", "src", "*"))
    need, who, unread = (0, 0, 0), "nothing", []
    for pkg in tomllib.load(open("Cargo.lock", "rb"))["package"]:
        if not pkg.get("source", "").startswith("registry+"):
            continue
        found = [p for r in registries for p in [os.path.join(r, f"{pkg['name']}-{pkg['version']}", "Cargo.toml")] if os.path.exists(p)]
        if not found:
            unread.append(f"{pkg['name']} {pkg['version']}")
            continue
        rv = tomllib.load(open(found[0], "rb")).get("package", {}).get("rust-version")
        if isinstance(rv, str) and version(rv) > need:
            need, who = version(rv), f"{pkg['name']} {pkg['version']}"
    need_text = ".".join(map(str, need[:2] if need[2] == 0 else need))
    if version(claimed) != need:
        print(f"Cargo.toml says rust-version = {claimed}, but the lockfile needs {need_text} ({who}); set it to {need_text} and say so in the README")
        return 1
    note = f" ({len(unread)} packages for other platforms not fetched)" if unread else ""
    print(f"rust-version {claimed}: the lockfile's minimum, set by {who}{note}")
    return 0


sys.exit(main())
