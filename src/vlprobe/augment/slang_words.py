"""vlprobe's slang dictionary: standard word (lemma) -> informal equivalents.

Source notes. The entries were chosen by the vlprobe authors for this project; they are not
taken from NL-Augmenter's ``Slangificator`` lists (those come from a peevish.co.uk slang
dictionary whose licence is unclear) nor from any other list. Each slang word is a common
informal or colloquial English word for the same thing, mostly general English, some British
(marked ``(UK)`` in the comments) or American. Entries are kept to senses a picture caption
can use and leave out words whose slang reading is ambiguous in captions ("mug" for face,
"wheels" for car) or offensive. Nouns are given in the singular; plurals are made by
:func:`vlprobe.augment.inflect.inflect`. Keys are (lemma, coarse POS) with POS one of
``NOUN``, ``ADJ``, ``ADV``.

Version 1 (bump :data:`SLANG_VERSION` whenever an entry changes: outputs change with it).
"""

from __future__ import annotations

__all__ = ["SLANG", "SLANG_VERSION"]

SLANG_VERSION = "1"

_NOUNS = """
man: guy, dude, fella, bloke(UK)
woman: gal, lady
boy: lad, kiddo
girl: gal, lass
child: kid, youngster
baby: bub, babe
friend: buddy, pal, mate
mother: mom, mum, ma
father: dad, pop, pa
grandmother: granny, nan
grandfather: grandpa, gramps
policeman: cop
soldier: grunt
boss: honcho
doctor: doc
dog: doggo, pooch, mutt
cat: kitty, moggy(UK)
horse: nag
car: motor
automobile: motor
bicycle: bike
motorcycle: motorbike
television: telly(UK), tube
refrigerator: fridge
photograph: pic, snap
picture: pic
house: crib, pad
home: crib, pad
money: dough, cash
food: grub, chow
sandwich: sarnie(UK)
potato: spud
beer: brew, brewski
coffee: joe, java
cigarette: smoke, ciggie
toilet: loo(UK), john
sneaker: kick
helicopter: chopper
airplane: plane
guitar: axe
party: bash, shindig
fight: scrap, brawl
job: gig
mistake: goof, blunder
prison: slammer, clink
head: noggin
nose: schnozz
stomach: tummy, belly
belly: tummy
hand: mitt
idiot: dope, dork
nonsense: baloney, hogwash
"""

_ADJECTIVES = """
good: cool, awesome, ace
great: awesome, epic
excellent: ace, wicked
bad: lousy, crummy
crazy: nuts, bonkers
tired: beat, pooped, knackered(UK)
drunk: wasted, plastered, hammered
rich: loaded, minted(UK)
expensive: pricey
stylish: snazzy, swanky
fashionable: trendy, snazzy
small: teeny, itty-bitty
little: teeny, itty-bitty
large: humongous, ginormous
huge: humongous, ginormous
happy: chuffed(UK), stoked
excited: stoked, pumped
scared: spooked
stupid: dumb, dopey
nervous: jittery
strange: funky, freaky
weird: funky, freaky
dirty: grotty(UK), grubby
delicious: yummy, scrummy(UK)
fake: phony
broken: bust, busted
silly: goofy, daft
cold: nippy
angry: mad, cross
"""

_ADVERBS = """
very: super, mega, dead(UK)
really: real, totally
extremely: super, mega
completely: totally
quickly: pronto
definitely: defo(UK)
probably: prolly
"""


def _parse(block: str, pos: str) -> dict[tuple[str, str], tuple[str, ...]]:
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in block.strip().splitlines():
        word, _, rest = line.partition(":")
        slang = tuple(s.split("(")[0].strip() for s in rest.split(",") if s.strip())
        out[(word.strip(), pos)] = slang
    return out


SLANG: dict[tuple[str, str], tuple[str, ...]] = {
    **_parse(_NOUNS, "NOUN"), **_parse(_ADJECTIVES, "ADJ"), **_parse(_ADVERBS, "ADV"),
}
