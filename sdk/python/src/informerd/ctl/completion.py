"""``informerctl completion bash|zsh``: completion scripts made from the argument parser itself,
so they always offer the commands and flags that exist. Informer and queue arguments complete
to the names the daemon has (``informerctl __names informers|queues``, with the command line's
own connection flags)."""

from __future__ import annotations

import argparse
from typing import IO

from informerd.client import Client

# Positional arguments completed from the daemon, by their dest.
_DYNAMIC = {"informer": "informers", "queue": "queues"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: p for name, p in action.choices.items() if not name.startswith("__")}
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(s for a in parser._actions for s in a.option_strings)


def _positionals(parser: argparse.ArgumentParser) -> list[str]:
    return [
        a.dest
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``; zsh runs the bash one through bashcompinit."""
    prog = parser.prog
    fn = "_" + prog.replace("-", "_")
    cases = []
    top_flags = _flags(parser)
    commands = _subparsers(parser)
    for name, sub in sorted(commands.items()):
        verbs = _subparsers(sub)
        if verbs:
            cases.append(f'    {name}) words_="{" ".join(sorted(verbs))}" ;;')
            for verb, vp in sorted(verbs.items()):
                cases.append(_case(f"{name}/{verb}", vp))
        else:
            cases.append(_case(name, sub))
    body = f"""# {prog} completion for bash (zsh: autoload bashcompinit && bashcompinit first).
# source <({prog} completion bash)
{fn}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" words_="" dynamic="" i w v conn=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    case "$w" in
      --target|--token|--token-file|--ca-file|--cert-file|--key-file|--server-name)
        # bash splits words at "=" and ":" (COMP_WORDBREAKS): --target=host:port arrives as
        # --target = host : port, and --target host:port as --target host : port.
        [[ "${{COMP_WORDS[i+1]}}" == "=" ]] && ((i++))
        v="${{COMP_WORDS[i+1]}}"; ((i++))
        while [[ "${{COMP_WORDS[i+1]}}" == ":" && $((i + 2)) -lt $COMP_CWORD ]]; do
          v+=":${{COMP_WORDS[i+2]}}"; ((i += 2))
        done
        conn+=("$w" "$v"); continue ;;
      --target=*|--token=*|--token-file=*|--ca-file=*|--cert-file=*|--key-file=*|--server-name=*)
        conn+=("$w"); continue ;;
      -*) continue ;;
    esac
    if [[ -z "$path" ]]; then path="$w"
    elif [[ "$path" == queue && "$w" =~ ^(add|forget|len|drain)$ ]]; then path="queue/$w"
    else break; fi
  done
  case "$path" in
    "") words_="{" ".join(sorted(commands))} {" ".join(top_flags)}" ;;
{chr(10).join(cases)}
  esac
  if [[ -n "$dynamic" && "$cur" != -* ]]; then
    words_="$words_ $({prog} "${{conn[@]}}" --timeout 2s __names "$dynamic" 2>/dev/null)"
  fi
  COMPREPLY=($(compgen -W "$words_" -- "$cur"))
}}
complete -F {fn} {prog}
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def _case(path: str, parser: argparse.ArgumentParser) -> str:
    flags = " ".join(_flags(parser))
    dynamic = next((_DYNAMIC[p] for p in _positionals(parser) if p in _DYNAMIC), "")
    extra = f' dynamic="{dynamic}"' if dynamic else ""
    return f'    {path}) words_="{flags}"{extra} ;;'


async def names(client: Client, kind: str, out: IO[str]) -> int:
    if kind == "informers":
        for info in await client.admin.informers():
            out.write(info.id + "\n")
    else:
        for d in await client.admin.queues():
            out.write(d.queue.spec.name + "\n")
    return 0
