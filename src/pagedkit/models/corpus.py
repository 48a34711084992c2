"""A procedural corpus of short children's stories: the training text of the tiny model.

Why generate it: the embedded model ships inside the package, so its training text must
raise no licensing or download questions. A small seeded grammar (characters, places,
objects, feelings, dialogue, six plots) gives text varied enough that a few-million-parameter
model learns to write readable sentences, and the same seed always gives the same corpus, so
the model can be rebuilt bit for bit on the same machine (see `train_tiny`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Character:
    name: str
    kind: str  # a noun phrase without article: "little rabbit"
    he: str  # subject pronoun, "he" or "she"

    @property
    def his(self) -> str:
        return "his" if self.he == "he" else "her"

    @property
    def him(self) -> str:
        return "him" if self.he == "he" else "her"


CHARACTERS = [
    Character("Lily", "little girl", "she"), Character("Tom", "little boy", "he"),
    Character("Pip", "small rabbit", "he"), Character("Mia", "kind cat", "she"),
    Character("Max", "big dog", "he"), Character("Ben", "brave bear", "he"),
    Character("Sam", "shy mouse", "he"), Character("Zoe", "clever fox", "she"),
    Character("Leo", "happy lion", "he"), Character("Ruby", "tiny bird", "she"),
    Character("Anna", "curious girl", "she"), Character("Jack", "funny frog", "he"),
    Character("Rosa", "gentle duck", "she"), Character("Finn", "busy squirrel", "he"),
    Character("Ella", "sleepy owl", "she"), Character("Otto", "old turtle", "he"),
    Character("Nora", "quiet hedgehog", "she"), Character("Hugo", "strong goat", "he"),
    Character("Ivy", "little bee", "she"), Character("Oscar", "playful puppy", "he"),
    Character("Luna", "wise elephant", "she"), Character("Teddy", "small pig", "he"),
    Character("Daisy", "friendly cow", "she"), Character("Milo", "young horse", "he"),
]
PLACES = ["the park", "the forest", "the garden", "the beach", "the farm", "the meadow",
          "the hill", "the river", "the village", "the pond", "the yard", "the school",
          "the market", "the lake", "the mountain", "the library", "the orchard", "the zoo"]
HOMES = ["in a small house", "in a hole under a big tree", "in a cozy nest",
         "in a little house by the sea", "on a green farm", "in a house with a red door"]
ACTIVITIES = ["play outside", "read books", "sing songs", "run and jump", "draw pictures",
              "look at the stars", "eat apples", "dance in the sun", "swim in the pond",
              "climb trees", "bake cookies", "watch the clouds", "plant seeds", "ride a bike",
              "count the birds", "build with blocks"]
OBJECTS = ["ball", "kite", "hat", "book", "boat", "drum", "box", "cup", "shell", "flower",
           "key", "blanket", "bell", "stone", "spoon", "umbrella", "scarf", "whistle",
           "lantern", "basket", "feather", "button", "trumpet", "puzzle"]
COLORS = ["red", "blue", "green", "yellow", "shiny", "little", "old", "pretty", "big", "soft",
          "purple", "orange", "golden", "striped", "tiny", "warm"]
SPOTS = ["under a bush", "behind a rock", "in the tall grass", "under the bed",
         "next to the tree", "inside an old boot", "near the water", "on top of the fence",
         "behind the door", "under a pile of leaves", "in a hollow log", "beside the well"]
SHELTERS = ["under a big tree", "in a little cave", "under a bridge", "in an old barn",
            "under a wide leaf"]
TIMES = ["One sunny morning", "One day", "One rainy afternoon", "One cold evening",
         "One windy day", "The next day", "One bright morning", "One snowy morning",
         "Early one Sunday", "One warm summer night", "After breakfast"]
OPENINGS = ["Once upon a time, there was {kind} named {name}.",
            "There once was {kind} named {name}.",
            "Long ago, in a quiet village, there lived {kind} called {name}.",
            "{name} was {kind}."]
ENDINGS = ["From that day on, {a} and {b} were best friends.",
           "{a} smiled. It was the best day ever.",
           "That night, {a} went to sleep with a big smile.",
           "And they all lived happily ever after.",
           "{a} and {b} laughed and went home together."]


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _a(phrase: str) -> str:
    """The phrase with its indefinite article: "an old key", "a red ball"."""
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _lost_and_found(r: random.Random, a: Character, b: Character) -> list[str]:
    thing = f"{r.choice(COLORS)} {r.choice(OBJECTS)}"
    place, spot = r.choice(PLACES), r.choice(SPOTS)
    return [f"{a.name} had {_a(thing)}. {_cap(a.he)} loved it very much.",
            f"{r.choice(TIMES)}, {a.name} went to {place} to play.",
            f"When it was time to go home, the {thing} was gone! {a.name} felt sad.",
            f'"Where is my {thing}?" cried {a.name}.',
            f'{b.name} the {b.kind} saw {a.him}. "Don\'t be sad," said {b.name}. '
            f'"I will help you look."',
            f"They looked everywhere. At last, {b.name} found the {thing} {spot}.",
            f'"Thank you, {b.name}!" said {a.name}. "You are a good friend."']


def _sharing(r: random.Random, a: Character, b: Character) -> list[str]:
    thing = f"{r.choice(COLORS)} {r.choice(OBJECTS)}"
    return [f"{r.choice(TIMES)}, {a.name} got {_a('new ' + thing)}.",
            f"{_cap(a.he)} took it to {r.choice(PLACES)}. There {a.he} met {b.name} "
            f"the {b.kind}.",
            f'"Can I play with your {thing}?" asked {b.name}.',
            f'At first, {a.name} did not want to share. "It is mine," {a.he} said.',
            f"{b.name} looked sad and sat down alone.",
            f'Then {a.name} thought for a moment. "Here, we can play together," {a.he} said.',
            f"They played with the {thing} all day. Sharing was more fun than playing alone."]


def _storm(r: random.Random, a: Character, b: Character) -> list[str]:
    place = r.choice(PLACES)
    return [f"{r.choice(TIMES)}, {a.name} and {b.name} went to {place}.",
            "Soon the sky grew dark, and big drops of rain began to fall.",
            f'"I am scared," said {b.name}. "The thunder is so loud!"',
            f'{a.name} held {b.his} hand. "Come with me. I know a dry place," said {a.name}.',
            f"They hid {r.choice(SHELTERS)} and told each other stories until the rain stopped.",
            "When the sun came out, they saw a big rainbow in the sky.",
            f'"Look!" said {b.name}. "The storm is over, and it is so pretty!"']


def _making(r: random.Random, a: Character, b: Character) -> list[str]:
    thing = r.choice(["a sand castle", "a tall tower", "a cake", "a little boat", "a kite",
                      "a snowman", "a house for the birds"])
    return [f"{r.choice(TIMES)}, {a.name} wanted to make {thing}.",
            f'"Will you help me?" {a.he} asked {b.name} the {b.kind}. '
            f'"Yes!" said {b.name}.',
            f"They worked hard all morning. But then the wind blew, and {thing} fell down.",
            f"{a.name} was sad. {_cap(a.he)} wanted to give up.",
            f'"Let\'s try again," said {b.name}. "This time we will make it strong."',
            f"So they tried again, slowly and carefully. This time, {thing} did not fall.",
            f'"We did it!" they said. {a.name} learned that friends can do hard things '
            f"together."]


def _new_friend(r: random.Random, a: Character, b: Character) -> list[str]:
    game = r.choice(["hide and seek", "tag", "a running race", "catch", "jump rope"])
    return [f"{r.choice(TIMES)}, someone new came to {r.choice(PLACES)}. "
            f"It was {_a(b.kind)} called {b.name}.",
            f"{b.name} stood alone. {_cap(b.he)} did not know anyone.",
            f'{a.name} walked up to {b.him} and said, "Hello! Do you want to play {game}?"',
            f'{b.name} smiled. "Yes, please!" {b.he} said.',
            f"They played {game} until the sun went down. {b.name} was not alone anymore.",
            f'"See you tomorrow!" said {a.name}. "See you tomorrow!" said {b.name}.']


def _adventure(r: random.Random, a: Character, b: Character) -> list[str]:
    spot, place = r.choice(SPOTS), r.choice(PLACES)
    prize = f"{r.choice(COLORS)} {r.choice(OBJECTS)}"
    return [f"{r.choice(TIMES)}, {a.name} found an old map {spot}.",
            f'"Look, {b.name}!" said {a.name}. "The map shows a secret place near {place}."',
            f"{a.name} and {b.name} walked a long way. They crossed a little bridge and "
            f"climbed a hill.",
            f'{b.name} was tired. "Is it far?" {b.he} asked. "Just a little more," said '
            f"{a.name}.",
            f"At the end of the path, they found a box. Inside the box was {_a(prize)}.",
            f"They were so happy. They took the {prize} home and showed it to everyone."]


PLOTS: list[Callable[[random.Random, Character, Character], list[str]]] = [
    _lost_and_found, _sharing, _storm, _making, _new_friend, _adventure]


def story(rng: random.Random) -> str:
    """One story: an opening, a few lines about the hero, one plot, one ending."""
    a, b = rng.sample(CHARACTERS, 2)
    lines = [rng.choice(OPENINGS).format(kind=_a(a.kind), name=a.name),
             f"{_cap(a.he)} lived {rng.choice(HOMES)}. "
             f"{_cap(a.he)} loved to {rng.choice(ACTIVITIES)}."]
    lines += rng.choice(PLOTS)(rng, a, b)
    lines.append(rng.choice(ENDINGS).format(a=a.name, b=b.name))
    # Most stories are one paragraph; some break into two, so newlines are seen too.
    if rng.random() < 0.3:
        cut = rng.randrange(2, len(lines) - 1)
        return " ".join(lines[:cut]) + "\n" + " ".join(lines[cut:])
    return " ".join(lines)


def stories(n: int, seed: int) -> list[str]:
    """`n` stories from `seed`; the same arguments always give the same list."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    return [story(rng) for _ in range(n)]
