"""A small generative grammar for the corpus's free prose: stories and short essays.

Prose branches at almost every word, so a low-order draft guesses the target's continuation far
less often than it guesses templated JSON or refusals; that is where class-dependent acceptance
comes from.
"""

from __future__ import annotations

import random
from typing import Final

NAMES: Final = ["Mara", "Tobias", "Elena", "Jonah", "Priya", "Felix", "Ines", "Oren", "Lucia", "Samir",
                "Hazel", "Viktor", "Nadia", "Caleb", "Yuki", "Rosa", "Anders", "Leila", "Milo", "Greta"]
ROLES: Final = ["lighthouse keeper", "baker", "young sailor", "retired teacher", "clockmaker", "farmer",
                "night nurse", "street musician", "cartographer", "beekeeper", "fisherman", "librarian"]
PLACES: Final = ["a quiet fishing village", "the edge of an old forest", "a crowded harbor town",
                 "a mountain pass", "a sleepy river valley", "the outskirts of a northern city",
                 "an island with one road", "a desert crossroads", "a village of stone houses"]
WEATHER: Final = ["The wind came in cold from the sea", "Rain had fallen for three days",
                  "The morning was bright and still", "A heavy fog rolled over the hills",
                  "Snow covered the roofs", "The summer heat pressed on every street"]
OBJECTS: Final = ["a brass key", "a torn map", "a letter with no name", "a small wooden box",
                  "a silver compass", "an old photograph", "a glass bottle", "a notebook full of numbers"]
FINDS: Final = ["found", "discovered", "noticed", "picked up", "uncovered"]
SPOTS: Final = ["under the floorboards", "at the bottom of the well", "behind the bakery",
                "on the steps of the church", "in a drawer of the old desk", "near the broken gate"]
FEELINGS: Final = ["curious", "uneasy", "hopeful", "afraid", "restless", "strangely calm"]
ACTIONS: Final = ["walked to the harbor", "climbed the hill behind the house", "knocked on the neighbor's door",
                  "followed the path into the trees", "waited until the lamps were lit", "asked the oldest woman in town",
                  "sat by the fire and read again", "rowed across the bay"]
MEETS: Final = ["an old friend", "a stranger in a grey coat", "a child with a lantern", "the mayor",
                "a tired traveler", "a dog that seemed to know the way"]
SAYINGS: Final = ["Some doors are meant to stay closed", "Everything here has a history",
                  "You are not the first to ask", "The answer is closer than you think",
                  "Be careful what you carry home", "Nothing is lost forever"]
ENDINGS: Final = ["By morning the mystery felt smaller, but the world felt larger.",
                  "From that day on, the village told the story a little differently.",
                  "It was the beginning of a long journey, and nobody was ready for it.",
                  "Years later, the memory still returned whenever the wind changed.",
                  "And the box stayed on the shelf, closed, for a long time."]

TOPICS: Final = ["public libraries", "learning a second language", "city gardens", "long train journeys",
                 "the history of bread", "night skies", "small businesses", "walking to work",
                 "old maps", "community radio", "rivers", "handwritten letters"]
ESSAY_CLAIMS: Final = ["shape the way people think about their neighbors", "teach patience in a hurried age",
                       "connect the present with the past", "matter more than most people admit",
                       "offer a kind of freedom that is easy to forget", "reward anyone who pays attention"]
ESSAY_SUPPORTS: Final = ["Many people discover this only later in life", "Historians have noted this for centuries",
                         "Teachers often see it first in their students", "Anyone who has tried it knows the feeling",
                         "Cities that invest in it tend to change slowly but deeply"]
ESSAY_TURNS: Final = ["Of course, there are costs as well", "Critics argue that the benefits are overstated",
                      "Still, not everyone agrees", "Yet the picture is not entirely simple"]
ESSAY_CLOSES: Final = ["In the end, it is worth protecting.", "That is reason enough to care about it.",
                       "The question is not whether it matters, but how we keep it alive.",
                       "We would miss it more than we imagine."]


TIMES: Final = ["One evening", "Early one morning", "Late that night", "On a grey afternoon", "That winter",
                 "A week later", "Before dawn"]
TURNS: Final = ["turned it over slowly", "put it in a coat pocket", "said nothing to anyone", "laughed out loud",
                "wrote down every detail", "hid it under the bed", "held it up to the light"]
AFTERS: Final = ["The next day", "After breakfast", "When the bells rang", "Soon after", "Without telling anyone",
                 "At first light"]
LINKS: Final = ["and felt", "but still felt", "and for a while felt", "yet somehow felt", "and later felt"]


def story(rng: random.Random) -> tuple[str, str]:
    """(opening, continuation) of one generated story."""
    name, role, place = rng.choice(NAMES), rng.choice(ROLES), rng.choice(PLACES)
    obj = rng.choice(OBJECTS)
    opening = f"{name} was a {role} who lived in {place}. {rng.choice(WEATHER)}."
    other = rng.choice(MEETS)
    middle = [
        f"{rng.choice(AFTERS)} {name} {rng.choice(ACTIONS)}.",
        f"There {name} met {other}, who looked at {obj} for a long moment.",
        f'"{rng.choice(SAYINGS)}," {rng.choice(["said " + other, other + " said", "came the answer"])}.',
        f"{name} {rng.choice(ACTIONS)} {rng.choice(LINKS)} {rng.choice(FEELINGS)}.",
    ]
    rng.shuffle(middle)
    sentences = [
        f"{rng.choice(TIMES)} {name} {rng.choice(FINDS)} {obj} {rng.choice(SPOTS)}.",
        f"{name} felt {rng.choice(FEELINGS)} and {rng.choice(TURNS)}.",
        *middle[: rng.randint(2, 4)],
    ]
    for _ in range(rng.randint(1, 3)):
        sentences.append(f"{rng.choice([name, 'Then ' + name, 'Later ' + name])} {rng.choice(ACTIONS)} "
                         f"{rng.choice(LINKS)} {rng.choice(FEELINGS)}.")
    sentences.append(rng.choice(ENDINGS))
    return opening, " ".join(sentences)


def essay(rng: random.Random) -> tuple[str, str]:
    """(topic, essay text) of one generated short essay."""
    topic = rng.choice(TOPICS)
    first = f"{topic[0].upper()}{topic[1:]} {rng.choice(ESSAY_CLAIMS)}."
    parts = [first, f"{rng.choice(ESSAY_SUPPORTS)}.", f"{rng.choice(ESSAY_TURNS)}.",
             f"Some say that {topic} {rng.choice(ESSAY_CLAIMS)}, while others are not so sure.",
             f"{rng.choice(ESSAY_SUPPORTS)}.", rng.choice(ESSAY_CLOSES)]
    return topic, " ".join(parts)
