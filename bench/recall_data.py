"""The generated long-conversation set of `bench/recall.py`: built from a seed, nothing downloaded.

Each conversation is a user talking with an assistant over several sessions spread across weeks:
filler turns on everyday topics (cooking, code, travel, money, training, ...), some of them
calling tools (weather, web search, calendar, a calculator) with their results, and, among them,
planted facts ("the dentist moved my appointment to March 3", "the staging database password
rotates every 30 days", a pet's name, a flight booked through a tool). Some facts are revised in a
later session. The filler talks about the same things in general (password managers, flight
delays, cat food), so a search by the question's words meets distractors, as in a real log.

After the conversation come the questions, each with the answer string and its evidence: the
index, in `Conversation.messages`, of the message(s) that hold the fact (for a revised fact, the
revising message; for a fact that arrived in a tool result, the request and the result). Kinds:

- "literal": the question shares its key words with the fact ("What date was my dentist
  appointment moved to?");
- "paraphrase": it does not ("When do I get my teeth looked at?");
- "date": it asks when something was said ("When did I book the flight to Lisbon?"), answered
  by the `said_at` date of the evidence, which only the message's metadata holds;
- "revised": it asks for a fact that was later changed (the answer is the later value).

Every message carries `{"said_at": ISO 8601 date with its time zone}` in its metadata.

    python bench/recall_data.py [--seed N]   # prints the set's shape
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from turnlog import Message, ToolCall, ToolResult

__all__ = ["Conversation", "Question", "generate"]

KINDS = ("literal", "paraphrase", "date", "revised")


@dataclass(frozen=True)
class Question:
    """A question about an earlier part of a conversation."""

    text: str
    answer: str
    """The answer as a short string: its words are what the answer-in-view rate looks for."""
    evidence: tuple[int, ...]
    """Indices in `Conversation.messages` of the messages that hold the answer."""
    kind: str
    """One of `KINDS`."""
    fact: str
    """The planted fact's key (one fact may be asked about twice)."""


@dataclass
class Conversation:
    """One generated conversation: its messages in order, its turns, its questions."""

    id: str
    messages: list[Message] = field(default_factory=list)
    """The system prompt first, then every turn's messages."""
    turn_ends: list[int] = field(default_factory=list)
    """For each turn, the index one past its last message: compaction runs after each."""
    questions: list[Question] = field(default_factory=list)
    sessions: int = 0


MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
CITIES = ["Lisbon", "Osaka", "Denver", "Reykjavik", "Nairobi", "Montreal", "Porto", "Hanoi"]
CITIES += ["Edinburgh", "Seville", "Cape Town", "Krakow", "Austin", "Tbilisi"]
AIRLINES = ["TAP Air Portugal", "Lufthansa", "KLM", "Iberia", "Air Canada", "Finnair", "Delta"]
PET_NAMES = ["Biscuit", "Mochi", "Pepper", "Waffles", "Juniper", "Nimbus", "Clementine", "Ziggy"]
PET_NAMES += ["Tofu", "Pickles", "Marlowe", "Sprocket", "Basil", "Olive", "Rocket", "Hazel"]
PEOPLE = ["Priya", "Tomasz", "Ingrid", "Kwame", "Lucia", "Haruto", "Fatima", "Declan", "Ines"]
PEOPLE += ["Mateo", "Yusuf", "Greta", "Anika", "Rafael", "Siobhan", "Oskar"]
FOODS = ["peanuts", "shellfish", "sesame", "kiwi", "eggs", "cashews", "mustard"]
MEDS = ["lisinopril", "sertraline", "metformin", "levothyroxine", "atorvastatin", "amoxicillin"]
BOOKS = ["Piranesi", "The Overstory", "Klara and the Sun", "Station Eleven", "Middlemarch"]
BOOKS += ["The Remains of the Day", "Circe", "Pachinko", "Tomorrow, and Tomorrow, and Tomorrow"]
RESTAURANTS = ["Osteria Lupa", "Blue Heron", "Casa Mariposa", "The Copper Kettle", "Sakura Tei"]
RESTAURANTS += ["Little Saigon Kitchen", "Bistro Verde", "Smoke and Rye"]
HOTELS = ["Hotel Alma", "The Lantern Inn", "Harbor View Suites", "Casa do Rio", "Nordlys Lodge"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
PLANTS = ["fiddle leaf fig", "monstera", "snake plant", "bird of paradise", "pothos"]


def _day(rng: random.Random) -> str:
    return f"{rng.choice(MONTHS)} {rng.randint(2, 28)}"


def _code(rng: random.Random, letters: int, digits: int) -> str:
    head = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(letters))
    return head + "".join(rng.choice("0123456789") for _ in range(digits))


@dataclass
class _Fact:
    """A fact to plant: what the user says (or which tool turn carries it), how it is asked."""

    key: str
    say: str
    answer: str
    literal: str
    paraphrase: str
    revise: tuple[str, str] | None = None
    """What the user says later to change it, and the new answer."""
    dated: str | None = None
    """A "when did I ..." question about the day it was said."""
    tool: tuple[str, str, str] | None = None
    """(tool name, arguments JSON, result) when the fact arrives in a tool result."""
    ack: str = "Noted, I'll keep that in mind."


FactMaker = Callable[[random.Random], _Fact]


def _dentist(rng: random.Random) -> _Fact:
    first, later = _day(rng), _day(rng)
    return _Fact(
        "dentist",
        f"Ugh, the dentist's office just called: my appointment got moved to {first}. "
        "Remind me to take the afternoon off.",
        first,
        "What date was my dentist appointment moved to?",
        "When do I get my teeth looked at?",
        revise=(
            f"The dental clinic rescheduled me again, the new slot is {later} at 9am.",
            later,
        ),
    )


def _staging(rng: random.Random) -> _Fact:
    n, m = rng.choice([30, 45, 60, 90]), rng.choice([7, 14, 21])
    return _Fact(
        "staging",
        f"FYI for the deploy scripts: the staging database password rotates every {n} days, "
        "so don't hardcode it anywhere.",
        f"{n} days",
        "How often does the staging database password rotate?",
        "How long do the pre-prod DB credentials stay valid before they change?",
        revise=(
            f"Security tightened the policy: staging DB password now rotates every {m} days.",
            f"{m} days",
        ),
    )


def _kitten(rng: random.Random) -> _Fact:
    name = rng.choice(PET_NAMES)
    return _Fact(
        "kitten",
        f"We picked up the kitten from the shelter today! She's a grey tabby and we named her "
        f"{name}.",
        name,
        "What did we name the kitten from the shelter?",
        "What's our cat called?",
        ack="Congratulations! Tabbies are lovely. Let me know if you want tips for the first week.",
    )


def _dog(rng: random.Random) -> _Fact:
    name = rng.choice(PET_NAMES)
    return _Fact(
        "dog",
        f"Our beagle {name} has been chewing the couch cushions again, any ideas?",
        name,
        "What's the name of my beagle?",
        "What is my puppy called?",
        ack="Chewing is usually boredom or teething. Puzzle feeders and more walks help a lot.",
    )


def _flight(rng: random.Random) -> _Fact:
    city, airline, day = rng.choice(CITIES), rng.choice(AIRLINES), _day(rng)
    number = _code(rng, 2, 4)
    result = json.dumps(
        {
            "status": "confirmed",
            "carrier": airline,
            "flight": number,
            "destination": city,
            "departs": f"{day}, 07:40",
            "seat": f"{rng.randint(3, 38)}{rng.choice('ACDF')}",
        }
    )
    return _Fact(
        "flight",
        f"Please book me the morning flight to {city} on {day}, economy is fine.",
        number,
        f"What's the flight number of my {city} trip?",
        "Which plane am I catching for the vacation, what's its code?",
        dated=f"When did I book the flight to {city}?",
        tool=("book_flight", json.dumps({"destination": city, "date": day}), result),
        ack=f"Done: you're on {airline} {number} to {city}, departing {day} at 07:40.",
    )


def _wifi(rng: random.Random) -> _Fact:
    word = rng.choice(["otter", "maple", "granite", "harbor", "lantern"]) + str(rng.randint(10, 99))
    return _Fact(
        "wifi",
        f"Writing this down before I forget: the guest wifi password at the cabin is {word}.",
        word,
        "What's the guest wifi password at the cabin?",
        "How do visitors get online at our lake house?",
    )


def _allergy(rng: random.Random) -> _Fact:
    kid, food = rng.choice(PEOPLE), rng.choice(FOODS)
    return _Fact(
        "allergy",
        f"The pediatrician confirmed it, {kid} is allergic to {food}. We have to read every label "
        "now.",
        food,
        f"What is {kid} allergic to?",
        "Which ingredient must I keep out of my son's meals?",
        ack="That's a big adjustment. Many brands mark allergens in bold on the label.",
    )


def _rent(rng: random.Random) -> _Fact:
    a, b = rng.randint(14, 26) * 100, rng.randint(14, 26) * 100 + 50
    month = rng.choice(MONTHS)
    return _Fact(
        "rent",
        f"Letter from the landlord: rent goes up to ${a} starting in {month}.",
        f"${a}",
        "How much is the rent going up to?",
        "What will I be paying each month for the apartment?",
        revise=(
            f"Good news, we negotiated with the landlord and settled on ${b} instead.",
            f"${b}",
        ),
    )


def _manager(rng: random.Random) -> _Fact:
    name = rng.choice(PEOPLE)
    return _Fact(
        "manager",
        f"Reorg news: my new manager is {name}, she transferred from the Berlin office.",
        name,
        "Who is my new manager after the reorg?",
        "Who do I report to at work now?",
    )


def _gym(rng: random.Random) -> _Fact:
    a, b = rng.sample(WEEKDAYS, 2)
    return _Fact(
        "gym",
        f"I moved my strength training sessions to {a} evenings, the gym is emptier then.",
        a,
        "Which evenings are my strength training sessions on?",
        "What day do I usually lift weights?",
        revise=(
            f"Switching strength training again, {b} evenings work better with my schedule.",
            b,
        ),
    )


def _locker(rng: random.Random) -> _Fact:
    code = f"{rng.randint(10, 39)}-{rng.randint(10, 39)}-{rng.randint(10, 39)}"
    return _Fact(
        "locker",
        f"The combination for my locker at the pool is {code}.",
        code,
        "What's the combination for my locker at the pool?",
        "Which numbers open my storage spot at the swim club?",
    )


def _anniversary(rng: random.Random) -> _Fact:
    day = _day(rng)
    return _Fact(
        "anniversary",
        f"Our wedding anniversary is {day}, I want to plan something nice this year.",
        day,
        "When is our wedding anniversary?",
        "On which day did my wife and I get married?",
        ack="Lovely. A dinner somewhere meaningful or a short trip are both classic choices.",
    )


def _book(rng: random.Random) -> _Fact:
    title = rng.choice(BOOKS)
    return _Fact(
        "bookclub",
        f"The book club picked {title} for this month, I need to get a copy.",
        title,
        "Which book did the book club pick this month?",
        "What novel is my reading group on?",
    )


def _freeze(rng: random.Random) -> _Fact:
    day = _day(rng)
    return _Fact(
        "freeze",
        f"Heads up: the production deploy freeze starts on {day} for the audit.",
        day,
        "When does the production deploy freeze start?",
        "From what date can't we ship releases to prod?",
    )


def _meds(rng: random.Random) -> _Fact:
    med, dose = rng.choice(MEDS), rng.choice([5, 10, 20, 25, 50])
    return _Fact(
        "meds",
        f"The doctor started me on {med} {dose}mg, twice a day with food.",
        med,
        "Which medication did the doctor start me on?",
        "What pills am I supposed to be taking now?",
    )


def _hotel(rng: random.Random) -> _Fact:
    hotel, city, day = rng.choice(HOTELS), rng.choice(CITIES), _day(rng)
    code = _code(rng, 3, 5)
    return _Fact(
        "hotel",
        f"Booked the {hotel} in {city}, check-in {day}, confirmation number {code}.",
        code,
        f"What's the confirmation number for the {hotel}?",
        "What reference do I give at the front desk when I arrive for my stay?",
        dated=f"When did I book the {hotel}?",
    )


def _birthday(rng: random.Random) -> _Fact:
    day = _day(rng)
    return _Fact(
        "birthday",
        f"My mom's birthday is {day}, she'll be 70 this year.",
        day,
        "When is my mom's birthday?",
        "When should my mother's card arrive?",
    )


def _oncall(rng: random.Random) -> _Fact:
    a, b = _day(rng), _day(rng)
    return _Fact(
        "oncall",
        f"The on-call schedule is out, I'm on call the week of {a}.",
        a,
        "Which week am I on call?",
        "When do I carry the pager?",
        revise=(f"Swapped shifts with a teammate, so my on-call week is now {b}.", b),
    )


def _desk(rng: random.Random) -> _Fact:
    code = _code(rng, 2, 9)
    return _Fact(
        "desk",
        f"Ordered the standing desk finally, the tracking number is {code}.",
        code,
        "What's the tracking number of the standing desk?",
        "How can I follow the delivery of my new sit-stand workstation?",
        dated="When did I order the standing desk?",
    )


def _reservation(rng: random.Random) -> _Fact:
    place, day = rng.choice(RESTAURANTS), _day(rng)
    n, m = rng.randint(4, 6), rng.randint(7, 10)
    return _Fact(
        "reservation",
        f"Made a reservation at {place} for {n} people on {day}.",
        f"{n} people",
        f"How many people is the reservation at {place} for?",
        "How big is our party for the dinner out?",
        revise=(
            f"Update: I changed the {place} booking to {m} people, cousins are joining.",
            f"{m} people",
        ),
        dated=f"When did I make the reservation at {place}?",
    )


def _spare_key(rng: random.Random) -> _Fact:
    name = rng.choice(PEOPLE)
    return _Fact(
        "sparekey",
        f"If I ever lock myself out: the spare key is with {name} in apartment 4B.",
        name,
        "Who has my spare key?",
        "If I can't get into my flat, which neighbour should I knock on?",
    )


def _plant(rng: random.Random) -> _Fact:
    plant, n = rng.choice(PLANTS), rng.choice([7, 10, 12, 14])
    return _Fact(
        "plant",
        f"The nursery said the {plant} needs water every {n} days, no more.",
        f"{n} days",
        f"How often should I water the {plant}?",
        "How frequently does my big houseplant want a drink?",
    )


def _car(rng: random.Random) -> _Fact:
    miles = rng.choice([42000, 45500, 51000, 60000])
    return _Fact(
        "car",
        f"The mechanic said the next oil change is due at {miles} miles.",
        f"{miles}",
        "At what mileage is the next oil change due?",
        "When does the car need servicing again, by the odometer?",
    )


FACTS: tuple[FactMaker, ...] = (
    _dentist, _staging, _kitten, _dog, _flight, _wifi, _allergy, _rent, _manager, _gym,
    _locker, _anniversary, _book, _freeze, _meds, _hotel, _birthday, _oncall, _desk,
    _reservation, _spare_key, _plant, _car,
)  # fmt: skip


# Filler: topics with user requests and assistant sentences; some turns call a tool.
TOPICS: dict[str, tuple[list[str], list[str]]] = {
    "cooking": (
        [
            "What can I make for dinner with chickpeas, spinach and half a lemon?",
            "How long should I roast a whole chicken at 200C?",
            "My sourdough starter smells like nail polish remover, is it dead?",
            "Is there a way to make risotto without standing at the stove for 40 minutes?",
            "Can I freeze leftover coconut milk?",
            "Give me a quick weeknight pasta that isn't just tomato sauce again.",
        ],
        [
            "A chickpea and spinach stew with garlic, cumin and a squeeze of lemon at the end "
            "comes together in about twenty minutes.",
            "Roast at 200C for roughly 20 minutes per 500 grams plus 20 minutes, and check that "
            "the thickest part of the thigh reaches 74C.",
            "That acetone smell means the starter is hungry, not dead; feed it twice a day at a "
            "higher ratio for a few days.",
            "A baked risotto works well: toast the rice, add hot stock, cover and put it in the "
            "oven for about 25 minutes, then stir in butter and parmesan.",
            "Coconut milk freezes fine in ice cube trays, although it separates and is best used "
            "in cooked dishes afterwards.",
            "Try pasta with browned butter, sage and toasted walnuts, or a lemony ricotta and pea "
            "sauce that needs no cooking beyond the pasta itself.",
            "Salt the pasta water generously and keep a cup of it to loosen the sauce.",
            "If you have a pressure cooker, dried beans cook in about 35 minutes without soaking.",
            "Acid at the end, a little vinegar or citrus, brightens most stews and soups.",
        ],
    ),
    "code": (
        [
            "Why does my Python script say 'list index out of range' inside the loop?",
            "How do I squash my last three git commits into one?",
            "What's the difference between a process and a thread, in plain words?",
            "My Docker container exits immediately after starting, how do I debug it?",
            "Should I use a UUID or an auto-increment integer as the primary key?",
            "How do I read a large CSV file without running out of memory in pandas?",
        ],
        [
            "That error usually means the loop reads one element past the end; iterate over the "
            "items directly or use enumerate instead of indexing by a counter.",
            "Run git rebase -i HEAD~3, mark the second and third commits as squash, then edit "
            "the combined message.",
            "A process has its own memory space; threads share the memory of the process they "
            "belong to, which makes them cheaper but easier to get wrong.",
            "Run the container with an interactive shell as the entrypoint, or check docker logs "
            "on the stopped container to see what the main process printed.",
            "Integers are smaller and index well; UUIDs let clients create ids without asking the "
            "database, which helps with replication and merging.",
            "Pass chunksize to read_csv and process the file chunk by chunk, and set dtypes so "
            "pandas does not guess them as objects.",
            "Store secrets such as database passwords in the environment or a secrets manager, "
            "never in the repository.",
            "A failing test that only fails in CI often depends on the time zone or on the order "
            "the tests run in.",
            "Pin the versions in a lock file so every deploy installs the same dependencies.",
        ],
    ),
    "travel": (
        [
            "What should I pack for a week of hiking in early autumn?",
            "Is it worth paying for lounge access on a long layover?",
            "How early should I get to the airport for an international flight?",
            "Any tips for beating jet lag after flying east?",
            "What's the best way to get from the airport to the city center usually?",
        ],
        [
            "Layers matter most: a base layer that wicks, a warm mid layer, and a waterproof "
            "shell, plus two pairs of good socks per day of hiking.",
            "Lounge access pays off on layovers longer than three hours, especially with showers "
            "and a quiet place to work.",
            "For international flights, arrive about three hours early; check-in and bag drop "
            "often close an hour before departure.",
            "Shift your sleep an hour a day before you travel, get morning light on arrival and "
            "avoid long naps on the first afternoon.",
            "Trains are usually the fastest and cheapest link from the airport to the center; "
            "taxis make sense with luggage or after midnight.",
            "Flight delays are more common in the late afternoon, so early departures tend to be "
            "more reliable.",
            "Keep a photo of your passport and booking confirmations offline on your phone.",
            "Travel insurance that covers cancellations is worth it for non-refundable bookings.",
        ],
    ),
    "money": (
        [
            "How much of my paycheck should go into an emergency fund?",
            "Is it better to pay off my car loan early or invest the extra money?",
            "What's a simple way to track monthly spending without an app?",
            "Do index funds really beat picking individual stocks?",
            "How do I start budgeting when my income varies every month?",
        ],
        [
            "A common target is three to six months of essential expenses, built up with a fixed "
            "amount from each paycheck.",
            "Compare the loan's interest rate with a realistic return: above six percent, paying "
            "it down is a guaranteed win.",
            "A spreadsheet with one row per purchase and a monthly total per category is enough; "
            "review it every Sunday.",
            "Over long periods most actively picked portfolios trail a broad index fund after "
            "fees.",
            "Budget from your lowest typical month and treat anything above it as extra for "
            "savings or irregular bills.",
            "Automating transfers on payday makes saving the default rather than a decision.",
            "Rent and housing costs are usually the biggest line; keep them near a third of "
            "take-home pay if you can.",
        ],
    ),
    "fitness": (
        [
            "How many rest days do I need per week when starting to run?",
            "What's a good beginner routine for building strength at home?",
            "My knees hurt after squats, what am I doing wrong?",
            "Is it okay to work out on an empty stomach in the morning?",
            "How do I stay motivated to exercise in the winter?",
        ],
        [
            "Start with three runs a week and a rest or easy day between them, so tendons and "
            "joints can adapt.",
            "Push-ups, split squats, glute bridges, rows with a backpack and planks cover the "
            "main movements with no equipment.",
            "Knee pain in squats often comes from the knees caving in; push them out over the "
            "toes and keep the weight in your heels.",
            "Light or moderate training fasted is fine for most people; eat within an hour or two "
            "after harder sessions.",
            "Schedule workouts like appointments, lay out your clothes the night before, and "
            "find an indoor option for the worst days.",
            "Progress slowly: add about ten percent of volume per week at most.",
            "Sleep is the most underrated part of recovery.",
        ],
    ),
    "home": (
        [
            "How do I get rid of fruit flies in the kitchen?",
            "What's the best way to clean a cast iron pan?",
            "The bathroom grout is turning black, what works on it?",
            "Any ideas for making a small apartment feel bigger?",
            "How often should I replace the furnace filter?",
        ],
        [
            "A jar of cider vinegar with a drop of dish soap traps fruit flies; also take out the "
            "compost daily for a week.",
            "Rinse cast iron with hot water, scrub with coarse salt if needed, dry it on the "
            "stove and wipe a thin layer of oil on it.",
            "A paste of baking soda and a little hydrogen peroxide, scrubbed in with an old "
            "toothbrush, lifts most mildew from grout.",
            "Mirrors opposite windows, furniture on legs and one consistent light color make "
            "small rooms feel more open.",
            "Most furnace filters should be replaced every one to three months, more often with "
            "pets in the house.",
            "Cats and dogs shed more in spring, so the filter fills faster then.",
            "A label maker and clear bins make shared storage much easier to keep tidy.",
        ],
    ),
    "security": (
        [
            "Is a password manager actually safer than a notebook?",
            "How do I know if my email was in a data breach?",
            "Should I turn on two-factor authentication for everything?",
            "What makes a good passphrase?",
        ],
        [
            "A password manager lets you use a different long password everywhere, which matters "
            "more than where the list is kept.",
            "Breach notification services let you check an address; change the password of any "
            "account that appears and of any that reused it.",
            "Turn on two-factor authentication for email, banking and anything that can reset "
            "other accounts; an authenticator app beats text messages.",
            "Four or five random unrelated words are easy to remember and hard to guess.",
            "Rotating passwords on a schedule matters less than never reusing them.",
            "Shared credentials for a team belong in a vault with access logs.",
        ],
    ),
    "pets": (
        [
            "What's a good cat food brand for a picky eater?",
            "How often should a dog go to the vet for checkups?",
            "Any tips for introducing a new pet to an older one?",
            "Is it normal for a cat to sleep 16 hours a day?",
        ],
        [
            "Picky cats often prefer wet food at room temperature; try a few textures before "
            "switching brands.",
            "Healthy adult dogs usually see the vet once a year, seniors every six months.",
            "Keep them apart for a few days, swap bedding so they learn each other's scent, and "
            "feed them on either side of a closed door.",
            "Yes, cats commonly sleep twelve to sixteen hours, more when they are young or old.",
            "Puzzle feeders slow down fast eaters and keep a bored pet busy.",
        ],
    ),
    "work": (
        [
            "How do I write a status update my manager will actually read?",
            "I have four meetings back to back tomorrow, how do I survive that?",
            "How should I prepare for my performance review?",
            "What's a polite way to decline a meeting that has no agenda?",
        ],
        [
            "Lead with the outcome and any decision you need, then three bullets of progress and "
            "one of risks.",
            "Block five minutes between meetings to write notes and stretch, and keep water and "
            "a snack at hand.",
            "List what you shipped, what changed because of it and one thing you want to grow "
            "in, with examples.",
            "Ask for the goal and agenda, and offer to give your input asynchronously if the "
            "meeting is not essential for you.",
            "A weekly review on Friday afternoon keeps the backlog honest.",
        ],
    ),
}

TOOLS = ("get_weather", "web_search", "calendar_events", "calculator")


def _tool_turn(rng: random.Random, when: datetime, n: int) -> tuple[str, ToolCall, str, str]:
    """A filler request answered through a tool: (user text, call, result, answer)."""
    kind = rng.choice(TOOLS)
    call_id = f"call_{n}"
    if kind == "get_weather":
        city = rng.choice(CITIES)
        temps = [rng.randint(-3, 31) for _ in range(3)]
        result = json.dumps(
            {
                "city": city,
                "forecast": [
                    {"day": d, "high_c": t, "conditions": rng.choice(["sunny", "rain", "cloudy"])}
                    for d, t in zip(["today", "tomorrow", "day after"], temps, strict=True)
                ],
            }
        )
        return (
            f"What's the weather going to be like in {city} the next few days?",
            ToolCall(call_id, kind, json.dumps({"city": city, "days": 3})),
            result,
            f"In {city} expect highs of {temps[0]}, {temps[1]} and {temps[2]} C over the next "
            "three days. Bring a light jacket either way.",
        )
    if kind == "web_search":
        topic = rng.choice(list(TOPICS))
        question = rng.choice(TOPICS[topic][0])
        lines = rng.sample(TOPICS[topic][1], 3)
        result = "\n".join(
            f"[{i + 1}] {rng.choice(['forum', 'blog', 'guide', 'news'])}.example.com: {line}"
            for i, line in enumerate(lines)
        )
        return (
            "Can you look this up for me: " + question,
            ToolCall(call_id, kind, json.dumps({"query": question[:60]})),
            result,
            "Here's what the sources agree on. " + lines[0] + " " + lines[1],
        )
    if kind == "calendar_events":
        day = (when + timedelta(days=rng.randint(1, 6))).date().isoformat()
        items = rng.sample(
            ["standup 09:30", "1:1 with team lead 11:00", "lunch with Sam 12:30",
             "design review 14:00", "school pickup 15:30", "yoga 18:00", "sprint planning 10:00"],
            3,
        )  # fmt: skip
        return (
            f"What do I have on {day}?",
            ToolCall(call_id, kind, json.dumps({"date": day})),
            json.dumps({"date": day, "events": items}),
            f"On {day} you have {items[0]}, {items[1]} and {items[2]}.",
        )
    a, b = rng.randint(12, 990), rng.randint(2, 48)
    return (
        f"Quick math: if a subscription is ${a} a year, what is that per month over {b} months "
        "total?",
        ToolCall(call_id, kind, json.dumps({"expression": f"{a} / 12 * {b}"})),
        json.dumps({"result": round(a / 12 * b, 2)}),
        f"That comes to ${a / 12:.2f} a month, ${a / 12 * b:,.2f} over {b} months.",
    )


def _filler(rng: random.Random) -> tuple[str, str]:
    """A plain filler turn: the user's request and a reply of 3-7 sentences."""
    topic = rng.choice(list(TOPICS))
    asks, says = TOPICS[topic]
    openers = ["", "Hey, ", "Another question: ", "Random one, ", "Ok so ", "Thanks! Also, "]
    reply = rng.sample(says, min(len(says), rng.randint(3, 7)))
    closers = ["", " Want me to go into more detail?", " Happy to adjust if that doesn't fit.",
               " Let me know how it goes."]  # fmt: skip
    return rng.choice(openers) + rng.choice(asks), " ".join(reply) + rng.choice(closers)


SYSTEM = (
    "You are a helpful personal assistant. You help the user with everyday questions, work, "
    "travel and planning, and you can call tools: get_weather, web_search, calendar_events, "
    "calculator, book_flight. Be concise and friendly."
)


def _at(moment: datetime) -> dict[str, str]:
    return {"said_at": moment.isoformat()}


def generate(
    seed: int = 0,
    *,
    conversations: int = 10,
    sessions: tuple[int, int] = (7, 9),
    turns: tuple[int, int] = (12, 17),
    facts: int = 14,
) -> list[Conversation]:
    """The set: `conversations` conversations, each of `sessions` (a range) sessions of `turns`
    (a range) turns, days to weeks apart, with `facts` planted facts and their questions."""
    rng = random.Random(seed)
    out = []
    for c in range(conversations):
        out.append(_conversation(rng, f"conv{c:02d}", sessions, turns, facts))
    return out


def _conversation(
    rng: random.Random,
    cid: str,
    sessions: tuple[int, int],
    turns: tuple[int, int],
    n_facts: int,
) -> Conversation:
    conv = Conversation(cid)
    zone = timezone(timedelta(hours=rng.choice([-8, -5, 0, 1, 2, 5, 9])))
    start = datetime(2024, rng.randint(1, 9), rng.randint(1, 28), 9, 0, tzinfo=UTC).astimezone(zone)
    n_sessions = rng.randint(*sessions)
    plan = [rng.randint(*turns) for _ in range(n_sessions)]
    chosen = [maker(rng) for maker in rng.sample(FACTS, min(n_facts, len(FACTS)))]
    # Each fact gets a slot: (session, turn) before the last session; a revision goes later.
    slots: dict[tuple[int, int], tuple[str, _Fact]] = {}
    for fact in chosen:
        last = n_sessions - (3 if fact.revise else 1)
        while True:
            s = rng.randrange(0, max(1, last))
            t = rng.randrange(0, plan[s])
            if (s, t) not in slots:
                slots[(s, t)] = ("say", fact)
                break
        if fact.revise:
            while True:
                s2 = rng.randrange(s + 2, n_sessions)
                t2 = rng.randrange(0, plan[s2])
                if (s2, t2) not in slots:
                    slots[(s2, t2)] = ("revise", fact)
                    break
    said: dict[str, tuple[tuple[int, ...], datetime]] = {}
    revised: dict[str, int] = {}
    conv.messages.append(Message.system(SYSTEM))
    conv.turn_ends.append(1)
    when = start
    n = 0
    for s, count in enumerate(plan):
        if s:
            when += timedelta(days=rng.randint(3, 12), hours=rng.randint(-3, 3))
        moment = when
        for t in range(count):
            moment += timedelta(minutes=rng.randint(2, 9))
            meta = _at(moment)
            n += 1
            slot = slots.get((s, t))
            if slot is None:
                if rng.random() < 0.3:
                    ask, call, result, answer = _tool_turn(rng, moment, n)
                    conv.messages += [
                        Message("user", ask, metadata=meta),
                        Message("assistant", None, (call,), metadata=meta),
                        Message("tool", None, tool_results=(ToolResult(call.id, call.name,
                                                                       result),), metadata=meta),
                        Message("assistant", answer, metadata=meta),
                    ]  # fmt: skip
                else:
                    ask, answer = _filler(rng)
                    conv.messages += [
                        Message("user", ask, metadata=meta),
                        Message("assistant", answer, metadata=meta),
                    ]
            elif slot[0] == "say":
                fact = slot[1]
                at = len(conv.messages)
                if fact.tool:
                    name, arguments, result = fact.tool
                    call = ToolCall(f"call_{n}", name, arguments)
                    conv.messages += [
                        Message("user", fact.say, metadata=meta),
                        Message("assistant", None, (call,), metadata=meta),
                        Message("tool", None, tool_results=(ToolResult(call.id, name, result),),
                                metadata=meta),
                    ]  # fmt: skip
                    said[fact.key] = ((at, at + 2), moment)
                else:
                    conv.messages.append(Message("user", fact.say, metadata=meta))
                    said[fact.key] = ((at,), moment)
                conv.messages.append(Message("assistant", fact.ack, metadata=meta))
            else:
                fact = slot[1]
                assert fact.revise is not None
                revised[fact.key] = len(conv.messages)
                conv.messages += [
                    Message("user", fact.revise[0], metadata=meta),
                    Message("assistant", "Updated, thanks for letting me know.", metadata=meta),
                ]
            conv.turn_ends.append(len(conv.messages))
    conv.sessions = n_sessions
    for fact in chosen:
        evidence, moment = said[fact.key]
        if fact.revise:
            # the current value: asked one way or the other, answered by the revision
            text = fact.paraphrase if rng.random() < 0.5 else fact.literal
            conv.questions.append(
                Question(text, fact.revise[1], (revised[fact.key],), "revised", fact.key)
            )
            continue
        kind = rng.choice(["literal", "paraphrase"])
        text = fact.paraphrase if kind == "paraphrase" else fact.literal
        conv.questions.append(Question(text, fact.answer, evidence, kind, fact.key))
        if fact.dated:
            day = moment.date().isoformat()
            conv.questions.append(Question(fact.dated, day, evidence[:1], "date", fact.key))
    return conv


def main() -> None:
    import argparse

    from turnlog.text import message_text
    from turnlog.tokens import O200kCounter

    parser = argparse.ArgumentParser(description="the shape of the generated recall set")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counter = O200kCounter()
    kinds: dict[str, int] = {}
    for conv in generate(args.seed):
        tokens = sum(counter.count(message_text(m)) for m in conv.messages)
        print(
            f"{conv.id}: {conv.sessions} sessions, {len(conv.turn_ends) - 1} turns, "
            f"{len(conv.messages)} messages, {tokens:,} tokens, {len(conv.questions)} questions"
        )
        for q in conv.questions:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
    print(kinds, sum(kinds.values()))


if __name__ == "__main__":
    main()
