"""``kbench transfer run``: argparse wiring only; the logic is in :mod:`kbench.leaderboard.transfer_track`."""

from __future__ import annotations


def cmd_transfer_run(args) -> int:
    # the transfer track and the site renderer load when the command runs (`kbench --help` stays fast)
    from kbench.leaderboard.site import build
    from kbench.leaderboard.transfer_track import run_transfer
    root = args.leaderboard if args.update_leaderboard else None
    run_transfer(args.source, args.target, args.methods, args.k, args.seeds, args.out, root)
    if root is not None:
        build(root)
        print(f"wrote the records under {root}/transfer/ and rebuilt {root}/README.md and its site")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("transfer", help="the cross-device transfer track (docs/transfer.md)")
    sub = p.add_subparsers(dest="transfer_command", required=True)
    r = sub.add_parser("run", help="fit and score transfer methods on one source -> target pair",
                       description="Train on SOURCE, adapt with k measured TARGET problems, score on the "
                                   "target's random test part; one record per (method, k, seed).")
    r.add_argument("--source", required=True, help="source dataset (e.g. mi100)")
    r.add_argument("--target", required=True, help="target dataset (e.g. mi300x)")
    r.add_argument("--methods", nargs="+", default=None,
                   help="transfer methods (default: all of baselines/transfer.py)")
    r.add_argument("--k", nargs="+", type=int, default=[0, 100, 1000], help="k-shot budgets (default 0 100 1000)")
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="seeds (default 0-4)")
    r.add_argument("--out", default="results", help="per-seed records folder (default results/)")
    r.add_argument("--update-leaderboard", action="store_true",
                   help="write the aggregated records under LEADERBOARD/transfer/ and rebuild the site")
    r.add_argument("--leaderboard", default="leaderboard", help="leaderboard folder (default leaderboard/)")
    r.set_defaults(func=cmd_transfer_run)
