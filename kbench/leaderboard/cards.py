"""Where the leaderboard build finds each dataset's data card, so that a board folder copied anywhere keeps them.

The order: ``--cards DIR`` alone when given; else ``data_cards/<dataset>.md`` beside the leaderboard
folder (the repository's layout), the ``data_cards/`` of the kbench checkout that runs, and the installed
package's ``kbench/datasets/<dataset>/card.md`` (the collected NVIDIA sets ship theirs).
"""

from __future__ import annotations

from pathlib import Path

from kbench.leaderboard.store import read_entries

#: the dataset folders of the installed package: the collected datasets ship their card as ``card.md``
PACKAGE_DATASETS = Path(__file__).resolve().parents[1] / "datasets"
#: ``data_cards/`` of the kbench checkout this package runs from (absent in a wheel install)
CHECKOUT_CARDS = Path(__file__).resolve().parents[2] / "data_cards"


def card_places(root: Path, cards_dir: Path | None) -> list[str]:
    """Where a dataset's card is looked for, first found first: ``--cards`` alone when given; else
    ``data_cards/`` beside the leaderboard folder, the checkout's ``data_cards/`` and the package's
    ``datasets/<name>/card.md``."""
    if cards_dir is not None:
        return [str(Path(cards_dir) / "<dataset>.md")]
    return [str(root.resolve().parent / "data_cards" / "<dataset>.md"), str(CHECKOUT_CARDS / "<dataset>.md"),
            str(PACKAGE_DATASETS / "<dataset>" / "card.md")]


def cards_found(root: Path, datasets: list[str], cards_dir: Path | None) -> dict[str, Path]:
    found = {}
    for d in datasets:
        hit = next((Path(p.replace("<dataset>", d)) for p in card_places(root, cards_dir)
                    if Path(p.replace("<dataset>", d)).is_file()), None)
        if hit is not None:
            found[d] = hit
    return found


def missing_cards(root: str | Path, cards_dir: Path | None = None) -> list[str]:
    """The datasets of the board with no data card found (:func:`card_places`)."""
    root = Path(root)
    datasets = sorted({dataset for dataset, _ in read_entries(root)})
    return [d for d in datasets if d not in cards_found(root, datasets, cards_dir)]
