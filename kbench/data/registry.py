"""The datasets kbench knows: names, aliases, devices, sources, licenses."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbench.sources.cnnopt import dataset_spec

MIOPEN_SOURCE = {
    "repository": "https://github.com/ROCm/MIOpen",
    "commit": "2d1fd997a6fcf801ac4ca7a63e0656ef1cb9f488",
    "folder": "src/kernels/",
    "license": "MIT",
}
MIOPEN_CITATION = """@misc{miopen,
  title  = {{MIOpen}: AMD's Machine Intelligence Library},
  author = {{Advanced Micro Devices, Inc.}},
  howpublished = {\\url{https://github.com/ROCm/MIOpen}},
  note   = {find-db files from src/kernels/, commit 2d1fd997a6fcf801ac4ca7a63e0656ef1cb9f488}
}
@article{khan2019miopen,
  title   = {{MIOpen}: An Open Source Library For Deep Learning Primitives},
  author  = {Khan, Jehandad and Fultz, Paul and Tamazov, Artem and Lowell, Daniel and Liu, Chao and
             Melesse, Michael and Nandhimandalam, Murali and Nasyrov, Kamil and Perminov, Ilya and
             Shah, Tejash and others},
  journal = {arXiv preprint arXiv:1910.00078},
  year    = {2019}
}"""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    device: str
    arch: str
    vendor: str
    library: str
    task: str
    license: str
    aliases: tuple[str, ...] = ()
    raw_file: str | None = None  # path under ../shared/data
    collected: str | None = None  # repo folder of kbench's own collector output (kbench collect)
    source: dict = field(default_factory=dict)
    citation: str = ""
    default_split: str = "random"
    version: str | None = None  # the dataset's own version where it differs from the format's (labels re-measured)
    align_with: str | None = None  # a dataset of another GPU on the same corpus: the card checks the alignment
    # the id of the last collector run this version holds: a raw folder grows run by run between
    # versions, and the runs after this one wait for the next version (run ids start with their UTC time)
    collected_through: str | None = None
    # repo folders of kbench's collector output that measured some problem-directions of ``collected``
    # again (all of their plans): their measurements replace the base's (kbench.collect.packaging.package)
    retimed: tuple[str, ...] = ()
    # the candidate set of a collected dataset (kbench.collect.packaging.package.VARIANTS); a dataset of another
    # variant than "default" is named "<base>-<variant>" and loads as kbench.load(base, variant=...)
    variant: str = "default"
    # the convolutions' spatial rank: 2, or 3 for a set of 3D convolutions (whose problems, features and
    # splits differ); pooled models pool sets of one rank, and a 3D set with its own GPU's 2D set
    spatial_dims: int = 2


#: the version of the datasets converted from MIOpen's databases (what each holds: CHANGELOG.md, "Datasets")
MIOPEN_DATASETS_VERSION = "1.1.0"


def _amd(name, alias, device, arch):
    return DatasetSpec(
        name=name, aliases=(alias,), device=device, arch=arch, vendor="AMD", library="MIOpen",
        task="kernel-selection", license="MIT", raw_file=f"miopen/{alias}.HIP.fdb.txt.bz2",
        source=MIOPEN_SOURCE, citation=MIOPEN_CITATION, version=MIOPEN_DATASETS_VERSION,
    )


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        _amd("mi100", "gfx90878", "AMD Instinct MI100 (gfx908, 120 CUs)", "gfx908"),
        _amd("mi50", "gfx906_60", "AMD Instinct MI50/MI60 class (gfx906, 60 CUs)", "gfx906"),
        _amd("mi210", "gfx90a68", "AMD Instinct MI210 / MI250 GCD (gfx90a, 104 CUs)", "gfx90a"),
        _amd("mi250x", "gfx90a6e", "AMD Instinct MI250X GCD (gfx90a, 110 CUs)", "gfx90a"),
        _amd("mi300x", "gfx942130", "AMD Instinct MI300X (gfx942, 304 CUs)", "gfx942"),
        _amd("gfx1030", "gfx1030_36", "AMD RDNA2 gfx1030 (36 CUs)", "gfx1030"),
    ]
}


def _tuning(name, alias, device, arch):
    return DatasetSpec(
        name=name, aliases=(f"{alias}-tuning",), device=device, arch=arch, vendor="AMD", library="MIOpen",
        task="tuning", license="MIT", raw_file=f"miopen/{alias}.db.bz2", source=MIOPEN_SOURCE,
        citation=MIOPEN_CITATION, version=MIOPEN_DATASETS_VERSION,
    )


for _spec in (_tuning("mi50-tuning", "gfx906_60", "AMD Instinct MI50/MI60 class (gfx906, 60 CUs)", "gfx906"),
              _tuning("mi300x-tuning", "gfx942130", "AMD Instinct MI300X (gfx942, 304 CUs)", "gfx942")):
    DATASETS[_spec.name] = _spec

DEFAULT_DATASET = "mi100"


def resolve_name(name: str) -> str | None:
    """Canonical dataset name for a name or alias (case-insensitive), or None."""
    key = str(name).strip().lower()
    for spec in DATASETS.values():
        if key == spec.name or key in (a.lower() for a in spec.aliases):
            return spec.name
    return None


def register(spec: DatasetSpec) -> None:
    """Add a dataset spec (used by the sources that build further datasets)."""
    DATASETS[spec.name] = spec


register(DatasetSpec(
    name="h100", device="NVIDIA H100 80GB HBM3 (SXM, 132 SMs)", arch="sm_90", vendor="NVIDIA",
    library="cuDNN (frontend graph API)", task="kernel-selection", license="MIT", collected="raw/h100",
    source={"collector": "kbench collect cudnn", "folder": "raw/h100"},
    # what each version holds: CHANGELOG.md, "Datasets"
    version="1.5.0", collected_through="20261125T083252-f27045", retimed=("raw/h100-pytorch-strides",),
))
register(DatasetSpec(
    name="h200", device="NVIDIA H200 (132 SMs)", arch="sm_90", vendor="NVIDIA",
    library="cuDNN (frontend graph API)", task="kernel-selection", license="MIT", collected="raw/h200",
    source={"collector": "kbench collect cudnn", "folder": "raw/h200"}, align_with="h100",
    # what each version holds: CHANGELOG.md, "Datasets"
    version="1.6.0", collected_through="20261126T232709-dcad2d", retimed=("raw/h200-pytorch-strides",),
))


register(DatasetSpec(
    name="h200-3d", device="NVIDIA H200 (132 SMs)", arch="sm_90", vendor="NVIDIA",
    library="cuDNN (frontend graph API)", task="kernel-selection", license="MIT", collected="raw/h200-3d",
    source={"collector": "kbench collect cudnn", "folder": "raw/h200-3d", "corpus": "kbench collect corpus3d"},
    version="0.5.0", collected_through="20261203T165459-2852b9", spatial_dims=3,
    retimed=("raw/h200-3d-retimed",),
))


def _register_variant(base: str, variant: str, align_with: str | None = None) -> None:
    """The ``variant`` candidate set of the collected dataset ``base``: the same raw measurements, problem
    ids and splits, packaged by that variant's rule."""
    from dataclasses import replace
    spec = DATASETS[base]
    register(replace(spec, name=f"{base}-{variant}", aliases=(), variant=variant, align_with=align_with,
                     source={**spec.source, "variant": variant}))


# what PyTorch's cuDNN path may run with its default flags (TF32 on, not deterministic): docs/variants.md
_register_variant("h100", "pytorch")
_register_variant("h200", "pytorch", align_with="h100-pytorch")
_register_variant("h200-3d", "pytorch")


def variant_name(name: str, variant: str | None) -> str:
    """The registered name of ``name``'s ``variant`` (``"h200", "pytorch"`` -> ``"h200-pytorch"``)."""
    if variant in (None, "default"):
        return name
    return f"{name}-{variant}"


def variants_of(name: str) -> list[str]:
    """The variants registered for the collected dataset ``name`` (``default`` first)."""
    return ["default"] + sorted(s.variant for s in DATASETS.values() if s.name == f"{name}-{s.variant}"
                                and s.variant != "default")


def _register_tile_datasets() -> None:
    # The tile-size datasets (PACT 2022 artifact) describe themselves in their converter.
    for gpu in ("v100", "rtx2080ti"):
        register(DatasetSpec(**dataset_spec(gpu)))


_register_tile_datasets()
