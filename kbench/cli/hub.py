"""``kbench publish``: upload a dataset to the Hugging Face Hub (see :mod:`kbench.hub`)."""

from __future__ import annotations


def cmd_publish(args) -> int:
    from kbench.hub import publish  # loads when the command runs (`kbench --help` stays fast)
    res = publish(args.name, args.repo_id, private=args.private, revision=args.revision,
                  dry_run=args.dry_run, endpoint=args.endpoint, out_dir=args.out)
    if args.out:
        print(f"the repository folder is kept in {args.out}")
    if not res.dry_run:
        total = sum(f["bytes"] for f in res.files.values())
        print(f"published {args.name} to {res.repo_id} (revision {res.revision}): {len(res.files)} files, "
              f"{total:,} bytes, commit {res.commit}")
        print(f"  {res.commit_url}")
        print(f'  load it with kbench.load("hf://{res.repo_id}", revision="{res.commit}")')
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "publish", help="publish a dataset to the Hugging Face Hub",
        description="Upload a dataset (data card README.md with `datasets` configs, parquet tables, "
                    "kbench_manifest.json with sha256 of every file) to a Hub dataset repo in one commit. "
                    "The token comes from `hf auth login` / `huggingface-cli login` or HF_TOKEN.")
    p.add_argument("name", help="dataset name or alias (e.g. mi100), or a dataset folder")
    p.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="Hub dataset repo, e.g. my-org/kbench-mi100")
    p.add_argument("--private", action="store_true", help="create the repo private (ignored if it exists)")
    p.add_argument("--revision", default="main", help="branch to commit to (default: main; created if missing)")
    p.add_argument("--dry-run", action="store_true", help="print exactly what would be uploaded; upload nothing")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="also keep the repository folder in DIR (new or empty), e.g. to try it with "
                        "datasets.load_dataset(DIR, ...) before publishing")
    p.add_argument("--endpoint", default=None, metavar="URL",
                   help="Hub endpoint (default: HF_ENDPOINT or https://huggingface.co)")
    p.set_defaults(func=cmd_publish)
