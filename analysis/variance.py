"""What a study's replicates vary and what they hold fixed, said from their spec.json dicts: replicate r moves the
base seed, the split seed and the data generation seed by the same stride (`oracle_search.seeds.replicate_spec`),
and keeps everything else of the spec."""
from __future__ import annotations

from typing import Any

OWN_TEST_SPLIT = ("cifar10", "cifar100", "imagenet")  # validation is carved from training; the test set is their own
GENERATED = ("mnist1d", "synthetic")  # generated from `data_seed` (trainables.data)
DISPLAY = {"mnist1d": "MNIST-1D", "synthetic": "the synthetic clusters"}
DEFAULTS = {"seed": 0, "split_seed": 0, "data_seed": 42}  # ExperimentSpec's, for spec.json written before a field


def _values(specs: list[dict[str, Any]], name: str) -> list[int]:
    return [int(s.get(name, DEFAULTS[name])) for s in specs]


def _listed(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _one_or_all(values: list[Any]) -> str:
    return str(values[0]) if len(set(values)) == 1 else _listed(values)


def variance_sentence(specs: list[dict[str, Any]]) -> str:
    """One or two sentences: what varies per replicate (the seeds; the split, `split_seed`; a generated dataset's
    generation seed, `data_seed`; with their values, in the replicates' order) and what stays fixed (the code, the
    machine's arithmetic, the max_lr grid, the rest of the spec); whether the test split is the dataset's own, or
    whether a user's loader may ignore the split seed."""
    if not specs:
        return ""
    dataset = str(specs[0].get("dataset", ""))
    user = ":" in dataset
    own_test = dataset in OWN_TEST_SPLIT
    generated = dataset in GENERATED
    seeds, splits, made = _values(specs, "seed"), _values(specs, "split_seed"), _values(specs, "data_seed")
    varies, fixed = [], []
    if len(set(seeds)) > 1:
        varies.append(f"the seeds, so the initialisations and batch orders (base seeds {_listed(seeds)})")
    else:
        fixed.append(f"the seeds (base seed {seeds[0]})")
    what = "the train/validation split" if own_test else "the train/validation/test split"
    if own_test:
        what += f" ({dataset}'s own test set is the same in every replicate)"
    if user:
        item = (f"the data {dataset} loads, split_seed {_one_or_all(splits)} and data_seed {_one_or_all(made)} "
                f"(a user's loader: it may ignore either)")
        (varies if len(set(splits)) > 1 or len(set(made)) > 1 else fixed).append(item)
    elif len(set(splits)) > 1:
        varies.append(f"{what}, split_seed {_listed(splits)}")
    else:
        fixed.append(f"{what}, split_seed {splits[0]}")
    if generated:
        gen = f"the generated data of {DISPLAY.get(dataset, dataset)}"
        (varies if len(set(made)) > 1 else fixed).append(f"{gen}, data_seed {_one_or_all(made)}")
    precisions = [str(s.get("precision", "auto")) for s in specs]
    fixed += ["the code", f"the machine's arithmetic (precision {_one_or_all(precisions)})", "the max_lr grid",
              "the rest of the spec"]
    said = f"What varies per replicate: {'; '.join(varies)}." if varies else "No replicate varies anything."
    return f"{said} What stays fixed: {'; '.join(fixed)}."
