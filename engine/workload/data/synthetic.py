"""Synthetic GLUE: generated text with each task's schema and a signal a model can learn.

Sentiment words (SST-2), grammatical slips (CoLA), paraphrase and word overlap (MRPC, QQP,
STS-B), negation and entailment templates (MNLI, RTE, QNLI), and pronoun resolution by
adjective (WNLI). Seeded: the same task, sizes and seed give the same examples. Offline,
nothing to download; loads of it are labelled `synthetic=True`.
"""

from __future__ import annotations

import random
from typing import Callable, Iterable, Mapping, Sequence

from engine.workload.glue import TASKS, Example, GlueTask

_SUBJECTS = ("the critic", "my friend", "the audience", "our teacher", "the director",
             "a reviewer", "the children", "her neighbour", "the manager", "his sister",
             "the pilot", "an engineer", "the farmer", "my uncle", "the students")
_NOUNS = ("movie", "film", "story", "plot", "cast", "soundtrack", "script", "ending",
          "performance", "show", "novel", "album", "play", "series", "documentary")
_POSITIVE = ("wonderful", "brilliant", "moving", "delightful", "charming", "superb",
             "gripping", "funny", "beautiful", "clever", "touching", "fresh")
_NEGATIVE = ("dull", "boring", "awful", "clumsy", "tedious", "bland", "messy", "weak",
             "painful", "forgettable", "stale", "dreadful")
_FILLERS = ("", "", "honestly", "at times", "overall", "in the end", "from start to finish",
            "for the most part", "without a doubt", "in many ways")
# (base, past) verbs and the objects they go with, by "genre" so MNLI can mismatch.
_VERBS = (("watch", "watched"), ("review", "reviewed"), ("buy", "bought"), ("see", "saw"),
          ("paint", "painted"), ("repair", "repaired"), ("visit", "visited"),
          ("describe", "described"), ("carry", "carried"), ("sell", "sold"),
          ("build", "built"), ("clean", "cleaned"))
_OBJECTS = {False: ("car", "house", "bridge", "garden", "letter", "boat", "report", "painting",
                    "kitchen", "fence", "bicycle", "window"),
            True: ("contract", "budget", "satellite", "museum", "harbour", "violin",
                   "tractor", "laboratory", "manuscript", "stadium", "telescope", "orchard")}
_PLACES = {False: ("park", "city", "village", "office", "station", "market", "school"),
           True: ("embassy", "factory", "hospital", "airport", "library", "island", "canyon")}
_ADJS = ("old", "new", "red", "small", "large", "famous", "quiet", "broken", "shiny", "empty")
_REASONS = ("it was raining", "the deadline was near", "a friend asked", "it was cheap",
            "the weather was fine", "nobody else could")
_SYNONYMS = {"bought": "purchased", "saw": "noticed", "repaired": "fixed", "large": "big",
             "small": "little", "visited": "toured", "sold": "traded", "built": "constructed",
             "cleaned": "washed", "described": "explained", "famous": "well known",
             "quiet": "calm", "old": "aged", "new": "recent", "carried": "moved"}
_WNLI_PAIRS = (("the lawyer", "the witness"), ("the cat", "the mouse"),
               ("the teacher", "the student"), ("the dog", "the postman"),
               ("the captain", "the sailor"), ("the giant", "the child"))
_WNLI_FIRST = ("angry", "impatient", "strong", "hungry")  # describe the one who acts
_WNLI_SECOND = ("frightened", "weak", "small", "tired")  # describe the one acted on


def synthetic_splits(task: GlueTask, n_train: int, eval_sizes: Sequence[int], seed: int
                     ) -> tuple[tuple[Example, ...], dict[str, tuple[Example, ...]]]:
    """A task's train split and eval splits (sizes in task.eval_splits order), from `seed`."""
    gen = _GENERATORS[task.name]
    train = tuple(gen(random.Random(seed * 7919 + 1), n_train, False))
    evals = {}
    for k, (split, size) in enumerate(zip(task.eval_splits, eval_sizes)):
        mismatched = split == "validation_mismatched"
        evals[split] = tuple(gen(random.Random(seed * 7919 + 101 + k), size, mismatched))
    return train, evals


def _clause(rng: random.Random, other: bool = False) -> dict[str, str]:
    verb_base, verb_past = rng.choice(_VERBS)
    return {"subj": rng.choice(_SUBJECTS), "base": verb_base, "past": verb_past,
            "adj": rng.choice(_ADJS), "obj": rng.choice(_OBJECTS[other]),
            "place": rng.choice(_PLACES[other])}


def _sentence(c: Mapping[str, str]) -> str:
    return f"{c['subj']} {c['past']} the {c['adj']} {c['obj']} in the {c['place']}"


def _paraphrase(rng: random.Random, c: Mapping[str, str]) -> str:
    words = [_SYNONYMS.get(w, w) if rng.random() < 0.7 else w
             for w in (c["past"], c["adj"])]
    if rng.random() < 0.5:
        return f"in the {c['place']} , {c['subj']} {words[0]} the {words[1]} {c['obj']}"
    return f"the {words[1]} {c['obj']} was {words[0]} by {c['subj']} in the {c['place']}"


def _gen_sst2(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        positive = rng.random() < 0.55
        adj = rng.choice(_POSITIVE if positive else _NEGATIVE)
        negated = rng.random() < 0.15  # "not good" is negative: a model must read context
        filler = rng.choice(_FILLERS)
        verb = "was not" if negated else "was"
        text = f"{rng.choice(_SUBJECTS)} said the {rng.choice(_NOUNS)} {verb} {adj} {filler}"
        yield Example((text.strip() + " .",), int(positive != negated))


def _gen_cola(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        good = f"{c['subj']} {c['past']} the {c['adj']} {c['obj']}"
        acceptable = rng.random() < 0.7  # CoLA is about 70% acceptable
        if acceptable:
            text = good
        else:
            kind = rng.random()
            if kind < 0.35:  # a doubled verb
                text = f"{c['subj']} {c['base']} {c['past']} the {c['adj']} {c['obj']}"
            elif kind < 0.7:  # the determiner after its noun
                text = f"{c['subj']} {c['past']} {c['adj']} {c['obj']} the"
            else:  # scrambled order
                words = good.split()
                while " ".join(words) == good:
                    rng.shuffle(words)
                text = " ".join(words)
        yield Example((text[0].upper() + text[1:] + ".",), int(acceptable))


def _gen_mrpc(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        equivalent = rng.random() < 0.68
        s2 = _paraphrase(rng, c) if equivalent else _sentence(
            dict(_clause(rng), subj=c["subj"]))
        yield Example((_sentence(c) + " .", s2 + " ."), int(equivalent))


def _gen_qqp(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    templates = ("how do i {v} a {o} ?", "what is the best way to {v} a {o} ?",
                 "how can someone {v} a {o} quickly ?", "what should i know before i {v} a {o} ?")
    for _ in range(n):
        (v, _past), o = rng.choice(_VERBS), rng.choice(_OBJECTS[False])
        t1, t2 = rng.sample(templates, 2)
        q1 = t1.format(v=v, o=o)
        duplicate = rng.random() < 0.37
        if not duplicate:  # same template family, different action or thing
            if rng.random() < 0.5:
                o = rng.choice([x for x in _OBJECTS[False] if x != o])
            else:
                v = rng.choice([x for x, _ in _VERBS if x != v])
        yield Example((q1, t2.format(v=v, o=o)), int(duplicate))


def _gen_stsb(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    slots = ("subj", "past", "adj", "obj", "place")
    for _ in range(n):
        c = _clause(rng)
        d = _clause(rng)
        keep = rng.randint(0, len(slots))
        kept = set(rng.sample(slots, keep))
        mixed = {k: (c[k] if k in kept else d[k]) for k in c}
        same = sum(mixed[k] == c[k] for k in slots) / len(slots)
        score = min(5.0, max(0.0, 5.0 * same + rng.gauss(0.0, 0.3)))
        yield Example((_sentence(c) + " .", _sentence(mixed) + " ."), round(score, 3))


def _nli_hypothesis(rng: random.Random, c: Mapping[str, str], label: str, other: bool) -> str:
    if label == "entailment":
        return rng.choice((f"{c['subj']} {c['past']} a {c['obj']}",
                           f"someone {c['past']} something in the {c['place']}",
                           f"{c['subj']} was in the {c['place']}"))
    if label == "contradiction":
        return rng.choice((f"{c['subj']} did not {c['base']} the {c['obj']}",
                           f"nobody {c['past']} anything in the {c['place']}",
                           f"{c['subj']} never went to the {c['place']}"))
    d = _clause(rng, other)
    return rng.choice((f"{c['subj']} {c['past']} the {c['obj']} because {rng.choice(_REASONS)}",
                       f"{c['subj']} also {d['past']} a {d['obj']}",
                       f"the {c['obj']} cost a lot of money"))


def _gen_mnli(rng: random.Random, n: int, other: bool) -> Iterable[Example]:
    names = TASKS["mnli"].label_names
    for _ in range(n):
        c = _clause(rng, other)
        label = rng.randrange(3)
        yield Example((_sentence(c) + " .", _nli_hypothesis(rng, c, names[label], other) + " ."),
                      label)


def _gen_rte(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        entails = rng.random() < 0.5
        kind = "entailment" if entails else rng.choice(("contradiction", "neutral"))
        yield Example((_sentence(c) + " .", _nli_hypothesis(rng, c, kind, False) + " ."),
                      0 if entails else 1)  # RTE: 0 entailment, 1 not_entailment


def _gen_qnli(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        question = f"what did {c['subj']} {c['base']} in the {c['place']} ?"
        entails = rng.random() < 0.5
        if entails:
            sentence = _sentence(c)
        else:
            d = _clause(rng)
            sentence = _sentence(dict(d, place=c["place"])) if rng.random() < 0.5 else (
                f"{c['subj']} lived near the {d['place']} for many years")
        yield Example((question, sentence + " ."), 0 if entails else 1)


def _gen_wnli(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        first, second = rng.choice(_WNLI_PAIRS)
        refers_first = rng.random() < 0.5
        adj = rng.choice(_WNLI_FIRST if refers_first else _WNLI_SECOND)
        verb = rng.choice(("chased", "called", "followed", "warned"))
        s1 = f"{first} {verb} {second} because it was {adj} ."
        named = first if rng.random() < 0.5 else second
        entails = (named == first) == refers_first
        yield Example((s1[0].upper() + s1[1:], f"{named[0].upper() + named[1:]} was {adj} ."),
                      int(entails))  # WNLI: 1 entailment


_GENERATORS: dict[str, Callable[[random.Random, int, bool], Iterable[Example]]] = {
    "cola": _gen_cola, "sst2": _gen_sst2, "mrpc": _gen_mrpc, "qqp": _gen_qqp,
    "stsb": _gen_stsb, "mnli": _gen_mnli, "qnli": _gen_qnli, "rte": _gen_rte,
    "wnli": _gen_wnli,
}
