#!/usr/bin/env python3
"""Seeded generator of long, tool-heavy agent threads with planted facts.

Output: {"messages": [...OpenAI Chat Completions messages...],
         "facts": [{"id", "kind", "position", "role", "check", "text", ...}],
         "meta": {...}}

The generator is pure standard library and deterministic for a given
(seed, domain, messages).  Every planted fact has one or more `check` strings
that occur in exactly one message of the thread (the carrier message at
`position`); the generator verifies this and re-rolls the thread (with a
derived, deterministic sub-seed) when a filler value collides with one.

Fact kinds: constraint, preference, identifier, path, error, decision.
Domains: coding, data, support.

Usage:
    python eval/generate.py --seed 7 --domain coding --messages 480 --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import string
import sys

GEN_VERSION = "1.0"
DOMAINS = ("coding", "data", "support")
KINDS = ("constraint", "preference", "identifier", "path", "error", "decision")

# --------------------------------------------------------------------------
# Vocabulary (filler).  Fact value pools further down are kept disjoint from
# these lists, and the final verification catches any accidental overlap.
# --------------------------------------------------------------------------

NOUNS = """account order invoice ledger payment cart session user report cohort shipment
refund token cache queue worker scheduler metric event batch record entry balance
customer product price discount coupon address profile setting config policy rule
limit quota window bucket shard partition index cursor page offset filter query
result response request handler route client server message channel topic stream
job task retry backoff timeout lock lease snapshot checkpoint migration schema
column table row field value key secret credential role permission grant audit
trace span log alert incident notification template draft summary total count
amount currency rate tax fee charge payout transfer deposit withdrawal statement""".split()

VERBS = """get load parse build sync update validate compute resolve render fetch emit
apply merge flush retry normalize serialize deserialize encode decode collect
reconcile dispatch enqueue dequeue acquire release refresh expire prune compact
aggregate split join map reduce filter sort rank score match lookup register
schedule cancel archive restore export import transform format sanitize verify""".split()

ADJS = """pending active stale fresh partial full raw clean dirty cached remote local
primary secondary legacy current next previous default custom internal external
daily weekly monthly hourly nightly batched async sync strict lenient""".split()

FIRST = """Ana Ben Chloe Dev Elena Farid Grace Hugo Ines Jonas Kira Liam Maya Noor Omar
Priya Quinn Rosa Sami Tara Umar Vera Wes Xena Yara Zane Aiko Bruno Carla Dmitri
Eun Felix Gita Hana Ivan Jana Kofi Lena Mateo Nia Oskar Paula Rafael Sofia Theo""".split()

LAST = """Okafor Lindqvist Moreau Tanaka Silva Novak Haddad Kowalski Ferreira Nguyen
Schmidt Rossi Kapoor Dubois Olsen Mendes Petrov Yilmaz Costa Brennan Hughes Larsen
Fischer Romero Sato Weber Ibrahim Walsh Duarte Keller Varga Horvat Nakamura""".split()

CITIES = """Austin Denver Leeds Porto Lyon Graz Ghent Turin Malmo Brno Aarhus Utrecht
Bilbao Cork Tampere Kaunas Plovdiv Sapporo Busan Pune Perth Quebec Calgary Tucson""".split()

FILLER_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1"]
FILLER_SERVICES = """checkout-api billing-worker ledger-sync search-indexer notif-gateway
auth-service cart-service pricing-engine report-builder webhook-relay""".split()

# --------------------------------------------------------------------------
# Distractors: ordinary prose with binding-sounding words that binds nothing.
# --------------------------------------------------------------------------

DISTRACTORS_COMMON = [
    "I never know how these dashboards work, honestly.",
    "The budget meeting ran long, sorry for the slow reply.",
    "We always seem to hit this kind of thing right before a holiday.",
    "You must get asked this stuff all the time.",
    "Probably not important, but the office wifi is terrible today.",
    "I'd prefer to be on vacation right now, but here we are.",
    "Never mind my earlier question about the logs, I found it.",
    "My manager always says 'measure twice', which is funny given our track record.",
    "The important thing is that we understand what happened, no rush on that.",
    "Someone at standup said we must have a leak somewhere, but who knows.",
    "Budget season is always chaos around here.",
    "I never got a straight answer from the vendor last time either.",
    "Honestly I prefer mornings for this kind of digging, my brain is mush right now.",
    "Not sure it's important, but the coffee machine is broken again.",
    "We must have changed something last week, I just can't remember what.",
    "There's always one more edge case, isn't there.",
    "I'll never understand why half our tools log at WARN by default.",
    "Apparently the Q3 budget review got moved again, so everyone's distracted.",
    "Always fun when the pager goes off at lunch.",
    "Whatever you think is best here, I don't have a strong opinion.",
    "If we had an unlimited budget I'd just throw hardware at it, but that's a joke.",
    "My old team never used tickets for anything, which was its own kind of chaos.",
    "People here prefer chat over email, which makes searching for anything impossible.",
    "At my last job we were never allowed to touch prod on Fridays; thankfully that's not a thing here.",
    "It's important to me that I actually learn how this works, so explain as you go if you like.",
    "The offsite budget was something like twelve grand and it all went on catering, apparently.",
    "I always forget which terminal tab is which.",
    "You must think I'm hopeless with this stuff.",
    "Most people would prefer a cleaner setup, but we inherited this one.",
    "Someone told me we should never trust the staging numbers, though I've never checked that claim.",
    "Long week. The planning meeting about next year's budget took the whole morning.",
    "My colleague swears he always reboots first, which tells you a lot about him.",
    "I never realised how much of this was held together with cron jobs.",
    "This must be the third time this month something like this came up.",
    "Not important, just curious: do you see a lot of threads like this?",
]

DISTRACTORS = {
    "coding": DISTRACTORS_COMMON + [
        "The linter always complains about something, I've stopped reading it.",
        "I never remember the flags for git bisect.",
        "Our CI must be the slowest in the company.",
        "I'd prefer tabs personally but the team settled that long before I joined, so ignore me.",
        "The architecture review said we must 'reduce complexity', whatever that means in practice.",
        "There was a debate about budgets for CI minutes, not my department though.",
    ],
    "data": DISTRACTORS_COMMON + [
        "I never know which of the three revenue tables is the 'real' one.",
        "Marketing always wants the numbers to go up and to the right.",
        "The finance folks prefer spreadsheets for everything, it's a whole culture.",
        "The budget dashboards were broken all of last week, separate issue.",
        "It's important to remember the data team is two people, so be kind to the warehouse.",
        "I must have run that query a hundred times by now.",
    ],
    "support": DISTRACTORS_COMMON + [
        "Customers always seem to write in right at closing time.",
        "I never know whether to call it a ticket or a case, the tools disagree.",
        "The team lead prefers we don't use exclamation marks, but that's more of a vibe than a rule.",
        "It's important to stay polite even when they're rude, but you know that.",
        "Our budget for the new headset order got approved, finally.",
        "This customer must have emailed us five times already today.",
    ],
}

# --------------------------------------------------------------------------
# Fact value pools (kept disjoint from filler vocabulary).
# --------------------------------------------------------------------------

BANNED_REGIONS = ["ap-southeast-3", "me-central-1", "sa-east-1", "af-south-1", "eu-south-2",
                  "ap-northeast-3", "il-central-1", "ca-west-1", "mx-central-1", "ap-southeast-4",
                  "eu-central-2", "ap-south-2", "me-south-1", "eu-north-1", "ap-east-1",
                  "asia-south2", "europe-west12", "me-west1", "southamerica-west1",
                  "africa-south1", "australia-southeast2", "northamerica-south1",
                  "europe-southwest1", "asia-northeast3", "us-gov-west-1"]
TIMEZONES = ["Australia/Adelaide", "America/Bogota", "Asia/Kathmandu", "Europe/Vilnius",
             "Africa/Nairobi", "Pacific/Auckland", "America/Halifax", "Asia/Tbilisi",
             "Atlantic/Reykjavik", "Europe/Tallinn", "America/Montevideo", "Asia/Almaty",
             "Pacific/Honolulu", "America/Winnipeg", "Asia/Karachi", "Europe/Lisbon",
             "Africa/Casablanca", "Asia/Manila", "America/Anchorage", "Australia/Darwin"]
LANGUAGES = ["Portuguese", "Dutch", "Turkish", "Finnish", "Romanian", "Indonesian", "Vietnamese",
             "Catalan", "Slovak", "Croatian", "Greek", "Ukrainian", "Estonian", "Slovenian", "Icelandic"]
# (code, name): the check is the name; the code also appears in the sentence.
CURRENCIES = [("CHF", "Swiss francs"), ("SEK", "Swedish kronor"), ("NZD", "New Zealand dollars"),
              ("ZAR", "South African rand"), ("SGD", "Singapore dollars"), ("NOK", "Norwegian kroner"),
              ("PLN", "Polish zloty"), ("CZK", "Czech koruna"), ("HUF", "Hungarian forint"),
              ("MXN", "Mexican pesos"), ("AUD", "Australian dollars"), ("CAD", "Canadian dollars"),
              ("DKK", "Danish kroner")]
COLORMAPS = ["cividis", "magma", "inferno", "plasma", "twilight_shifted", "Spectral",
             "coolwarm", "YlGnBu", "PuOr", "RdYlBu", "cubehelix", "tab20c"]
FONTS = ["IBM Plex Sans", "Source Serif 4", "Atkinson Hyperlegible", "Fira Sans",
         "Noto Sans Display", "Inter Tight", "Lexend Deca", "Work Sans", "Barlow Semi Condensed",
         "Public Sans", "Libre Franklin", "Red Hat Text"]
DATE_FORMATS = ["DD.MM.YYYY", "YYYY/MM/DD", "DD/MM/YYYY", "MM-DD-YYYY", "D MMM YYYY"]
NICKNAMES = ["Tomasz", "Jojo", "Sunny", "Mags", "Ravi", "Nell", "Ozzy", "Pippa", "Bexley", "Kiki",
             "Fitz", "Lulu", "Teddy", "Wren", "Zuzu", "Birdie"]
EXC_WORDS = ["quorum", "manifest", "drift", "watermark", "handshake", "checksum", "ingress", "settle",
             "replica", "ingest", "tombstone", "backfill", "fencing", "epoch", "gossip", "keyspace", "vector",
             "compaction", "heartbeat", "rebalance"]
GREETINGS = ["Kia ora", "Moin moin", "Hej hej", "Bom dia", "Dzien dobry", "Goeiedag", "Ahoj"]
FORMAT_POOL = ["UTF-16LE", "ISO-8859-15", "RFC 4180", "problem+json", "NDJSON",
               "Avro with snappy compression", "Parquet with zstd compression",
               "JSON:API envelopes", "RFC 3339 timestamps", "ISO 4217 currency codes",
               "Windows-1252", "CBOR", "Protobuf text format", "YAML 1.1"]
CODE_LIBS_BANNED = ["python-jose", "pycryptodome", "simplejson", "pendulum", "marshmallow",
                    "mongoengine", "tornado", "gevent", "eventlet", "cherrypy", "peewee",
                    "pyyaml-include", "requests-futures", "grequests", "pycurl", "twisted", "nose2",
                    "ujson", "dill", "cloudpickle", "paramiko", "fabric3"]
CODE_STYLE_PREFS = [("pnpm", "npm"), ("hatchling", "setuptools"), ("pytest-xdist", "serial runs"),
                    ("structlog", "print debugging"), ("attrs classes", "namedtuples"),
                    ("Conventional Commits", "free-form commit messages"),
                    ("kebab-case file names", "camelCase file names"),
                    ("numpydoc docstrings", "Google-style docstrings"),
                    ("tox environments", "ad-hoc virtualenvs"),
                    ("Mermaid diagrams", "ASCII diagrams")]
DATA_TOOL_PREFS = [("Polars", "pandas"), ("DuckDB", "SQLite"), ("Altair", "matplotlib"),
                   ("Jupytext notebooks", "raw .ipynb files"), ("window functions", "self-joins"),
                   ("CTEs", "nested subqueries"), ("Plotly Express", "seaborn")]
CARRIERS_BANNED = ["Parcelwise", "SwiftRoute", "NorthPost Freight", "Kestrel Couriers",
                   "BlueMarlin Logistics", "Orbitline Express", "TerraShip", "Quickhop"]
COMPETITORS = ["Zendora", "ShipNimbus", "Cartwell", "Tallyhive", "Brightcart", "Vendrix",
               "Parcelmind", "Lumora Goods", "Stockwise", "Trovely"]

CODING_DECISIONS = [
    ("the transactional outbox pattern", "dual writes from the request handler", "transactional outbox"),
    ("optimistic locking with a row_version column", "SELECT ... FOR UPDATE", "row_version"),
    ("pg_partman monthly partitions", "one giant events table", "pg_partman"),
    ("a token-bucket limiter backed by Redis", "a fixed-window counter", "token-bucket"),
    ("a blue/green cutover via the ingress weights", "an in-place rolling restart", "blue/green"),
    ("idempotency keys stored in DynamoDB", "deduplicating in the consumer", "DynamoDB"),
    ("a strangler-fig shim in front of the v1 router", "a big-bang rewrite", "strangler-fig"),
    ("server-sent events", "long polling", "server-sent events"),
    ("Temporal workflows", "a hand-rolled state machine in cron", "Temporal workflows"),
    ("protobuf over NATS JetStream", "JSON over RabbitMQ", "JetStream"),
    ("a read-through cache with jittered TTLs", "cache warming at deploy time", "jittered TTLs"),
    ("Linkerd without sidecars", "Istio", "Linkerd"),
    ("a shadow table with a trigger-based backfill", "ALTER TABLE in place", "shadow table"),
    ("bisecting with a Hypothesis reproducer", "adding more logging and waiting", "Hypothesis reproducer"),
    ("a circuit breaker via pybreaker", "unbounded retries", "pybreaker"),
    ("SQLAlchemy Core on the hot path", "the ORM everywhere", "SQLAlchemy Core"),
    ("vendoring the patched wheel", "forking the upstream library", "vendoring the patched wheel"),
    ("exponential backoff with full jitter", "a fixed 2 second sleep", "full jitter"),
]
DATA_DECISIONS = [
    ("a 28-day rolling median", "the weekly mean", "28-day rolling median"),
    ("difference-in-differences", "a naive before/after comparison", "difference-in-differences"),
    ("CUPED variance reduction", "the raw t-test", "CUPED"),
    ("a log-scale y axis", "two separate charts", "log-scale"),
    ("Kaplan-Meier survival curves", "a fixed 90-day churn flag", "Kaplan-Meier"),
    ("winsorizing at the 99th percentile", "dropping the outliers", "winsorizing"),
    ("a Bayesian beta-binomial model", "a frequentist proportion test", "beta-binomial"),
    ("incremental dbt models keyed on event_date", "full refreshes", "incremental dbt models"),
    ("a Holt-Winters forecast", "a straight linear trend", "Holt-Winters"),
    ("stratified sampling by plan tier", "a simple random sample", "stratified sampling"),
    ("a Sankey diagram", "a stacked bar chart", "Sankey"),
    ("bootstrapped confidence intervals", "normal-approximation intervals", "bootstrapped confidence intervals"),
    ("MinHash deduplication", "exact-match deduplication", "MinHash"),
    ("isotonic calibration", "Platt scaling", "isotonic calibration"),
]
SUPPORT_DECISIONS = [
    ("a free replacement via overnight courier", "a full refund", "overnight courier"),
    ("escalating to the Tier-2 billing desk", "handling it in the general queue", "Tier-2 billing desk"),
    ("a prepaid return label plus exchange", "asking them to ship it back at their cost", "prepaid return label"),
    ("a goodwill voucher instead of a price match", "matching the competitor price", "goodwill voucher"),
    ("splitting the shipment into two parcels", "holding the order until everything is in stock", "two parcels"),
    ("a callback from the duty manager", "another email reply", "callback from the duty manager"),
    ("reversing the duplicate charge at the gateway", "issuing a manual credit note", "reversing the duplicate charge"),
    ("re-shipping from the Rotterdam warehouse", "waiting for the lost parcel claim", "Rotterdam warehouse"),
    ("waiving the restocking fee", "charging the standard restocking fee", "waiving the restocking fee"),
    ("a phone verification step", "asking for a photo of the ID", "phone verification"),
    ("closing the duplicate tickets as merged", "answering each duplicate separately", "closing the duplicate tickets"),
    ("a partial refund for the missing accessory", "a full return of the bundle", "partial refund for the missing accessory"),
]

# Characters per token, rough, used only to size filler (run.py measures exactly).
CPT = {"code": 3.4, "log": 3.0, "table": 2.6, "json": 2.9, "text": 4.2}


# --------------------------------------------------------------------------
# Random helpers and the per-thread context
# --------------------------------------------------------------------------

class Ctx:
    def __init__(self, rng: random.Random, domain: str):
        self.rng = rng
        self.domain = domain
        self.used: set[str] = set()
        self.ncalls = 0
        self.pools: dict[str, list] = {}
        self.project = self.make_project()

    # ---- basic randomness
    def choice(self, seq):
        return self.rng.choice(seq)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def hexs(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def alnum(self, n: int, upper=False) -> str:
        alphabet = (string.ascii_uppercase if upper else string.ascii_lowercase) + string.digits
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def digits(self, n: int) -> str:
        return str(self.rng.randint(1, 9)) + "".join(self.rng.choice(string.digits) for _ in range(n - 1))

    def uniq(self, fn):
        for _ in range(10000):
            v = fn()
            if v not in self.used:
                self.used.add(v)
                return v
        raise RuntimeError("could not draw a unique value")

    def take(self, pool_name: str, pool: list):
        """Draw without replacement from a named pool (None when exhausted)."""
        if pool_name not in self.pools:
            items = list(pool)
            self.rng.shuffle(items)
            self.pools[pool_name] = items
        return self.pools[pool_name].pop() if self.pools[pool_name] else None

    def size_chars(self, lo_tok: int, hi_tok: int, kind: str) -> int:
        tok = math.exp(self.rng.uniform(math.log(lo_tok), math.log(hi_tok)))
        return int(tok * CPT[kind])

    def call_id(self) -> str:
        self.ncalls += 1
        return self.uniq(lambda: "call_" + self.alnum(24))

    # ---- names
    def ident(self, parts=2) -> str:
        words = [self.choice(VERBS)] + [self.choice(NOUNS) for _ in range(parts - 1)]
        return "_".join(words)

    def camel(self, parts=2, suffix="") -> str:
        return "".join(self.choice(NOUNS).capitalize() for _ in range(parts)) + suffix

    def person(self) -> str:
        return f"{self.choice(FIRST)} {self.choice(LAST)}"

    def ts(self, year=None) -> str:
        y = year or self.choice([2024, 2025])
        return (f"{y}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}T"
                f"{self.rng.randint(0, 23):02d}:{self.rng.randint(0, 59):02d}:{self.rng.randint(0, 59):02d}Z")

    def date(self) -> str:
        return f"{self.choice([2024, 2025])}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"

    def make_project(self):
        rng = self.rng
        pkg = self.choice(["ledgerline", "cartwheel", "paystack_core", "orderly", "finch", "tally",
                           "harbor", "quill", "beacon", "meridian"])
        corp = self.choice(["acme", "globex", "initech", "umbrella", "hooli", "vandelay", "stark",
                            "wayne", "tyrell", "cyberdyne"])
        files = []
        for _ in range(60):
            sub = self.choice(["api", "core", "models", "services", "workers", "utils", "adapters", "jobs"])
            files.append(f"src/{pkg}/{sub}/{self.ident(2)}.py")
        tests = [f"tests/{self.choice(['unit', 'integration'])}/test_{self.ident(2)}.py" for _ in range(30)]
        tables = [f"{self.choice(['fct', 'dim', 'stg', 'int'])}_{self.choice(NOUNS)}s" for _ in range(14)]
        return {"pkg": pkg, "corp": corp, "files": sorted(set(files)), "tests": sorted(set(tests)),
                "tables": sorted(set(tables)), "service": self.choice(FILLER_SERVICES),
                "bucket": f"{corp}-{self.choice(['data', 'exports', 'artifacts', 'warehouse'])}-{rng.randint(10, 99)}"}


VERBS_PT = """loaded parsed updated validated refreshed expired merged retried cancelled archived
restored exported flagged rejected approved delayed shipped processed queued reindexed rolled
migrated throttled patched reverted scheduled skipped duplicated recalculated""".split()

PROSE = [
    "The {noun} was {pt} after the {adj} {noun2} job finished.",
    "We {verb} the {noun} every {period} to keep the {noun2} table {adj}.",
    "If the {noun} is {adj}, the {noun2} will be {pt} automatically.",
    "Most {noun}s are {pt} within {n} {unit} of the {noun2} update.",
    "Please allow {n} business days for the {noun} to be {pt}.",
    "Our team reviewed the {noun} and found no {adj} {noun2} entries.",
    "This {noun} has been {pt} {n} times since {month}.",
    "The {adj} {noun} is owned by the {noun2} team and rarely changes.",
    "{Noun} handling moved to the {noun2} service in {month}.",
    "When a {noun} is {pt}, a {noun2} event is emitted to the {adj} queue.",
    "The {noun2} dashboard shows the {noun} count for the last {n} {unit}.",
    "Some {noun}s were {pt} twice because the {noun2} lock timed out.",
    "You can {verb} the {noun} from the admin panel under {Noun2} settings.",
    "The {noun} report is generated {period} and sent to the {noun2} channel.",
    "Older {noun}s are {pt} after {n} {unit} unless they are {adj}.",
    "A {adj} {noun} usually means the {noun2} was {pt} upstream.",
    "There is a known issue where the {noun} is {pt} before the {noun2} is ready.",
    "The {noun2} field on each {noun} is optional and defaults to {adj}.",
    "Thanks for your patience while we {verb} your {noun}.",
    "We noticed the {noun} was {pt} on {month} {day} and followed up with the {noun2} team.",
]


def words_sentence(ctx: Ctx, n: int) -> str:
    """Plausible English filler of roughly n words (template sentences, random nouns)."""
    out = []
    count = 0
    while count < max(4, int(n * 0.8)):
        s = ctx.choice(PROSE).format(
            noun=ctx.choice(NOUNS), noun2=ctx.choice(NOUNS), Noun=ctx.choice(NOUNS).capitalize(),
            Noun2=ctx.choice(NOUNS).capitalize(), adj=ctx.choice(ADJS), verb=ctx.choice(VERBS), pt=ctx.choice(VERBS_PT),
            period=ctx.choice(["hour", "day", "week", "night", "sprint"]), n=ctx.rng.randint(2, 48),
            unit=ctx.choice(["hours", "days", "minutes", "weeks"]), month=ctx.choice(MONTHS), day=ctx.rng.randint(1, 28))
        out.append(s)
        count += s.count(" ") + 1
    return " ".join(out)


# --------------------------------------------------------------------------
# Tool output builders (filler); `inject` places a line/snippet mid-output.
# --------------------------------------------------------------------------

def _insert_mid(lines: list[str], snippet_lines: list[str], ctx: Ctx) -> list[str]:
    if not lines:
        return snippet_lines
    lo = max(1, len(lines) // 4)
    hi = max(lo, (3 * len(lines)) // 4)
    at = ctx.rng.randint(lo, hi)
    return lines[:at] + snippet_lines + lines[at:]


def py_statement(ctx: Ctx, indent: str) -> list[str]:
    v = ctx.choice(NOUNS)
    r = ctx.rng.random()
    if r < 0.25:
        return [f"{indent}{v} = {ctx.ident(2)}({ctx.choice(NOUNS)}, {ctx.choice(['timeout', 'limit', 'retries'])}={ctx.rng.randint(1, 60)})"]
    if r < 0.4:
        return [f"{indent}if {v} is None:",
                f"{indent}    raise {ctx.camel(2, 'Error')}(\"{ctx.choice(NOUNS)} not {ctx.choice(['found', 'ready', 'valid', 'allowed'])}\")"]
    if r < 0.55:
        return [f"{indent}for {v} in {ctx.choice(NOUNS)}s:",
                f"{indent}    {ctx.ident(2)}({v})"]
    if r < 0.7:
        return [f"{indent}logger.{ctx.choice(['debug', 'info', 'warning'])}(\"{ctx.choice(VERBS)} {ctx.choice(NOUNS)} %s\", {v})"]
    if r < 0.8:
        return [f"{indent}# {words_sentence(ctx, ctx.rng.randint(4, 10))}"]
    if r < 0.9:
        return [f"{indent}{v}.{ctx.choice(NOUNS)} = {ctx.choice(['True', 'False', 'None', str(ctx.rng.randint(0, 500))])}"]
    return [f"{indent}with {ctx.choice(['session', 'lock', 'tx', 'conn'])}.{ctx.choice(['begin', 'acquire', 'cursor'])}() as {v}:",
            f"{indent}    {v}.execute({ctx.choice(NOUNS).upper()}_SQL, ({ctx.choice(NOUNS)},))"]


def gen_python_file(ctx: Ctx, target_chars: int, numbered: bool, inject: list[str] | None = None) -> str:
    lines = [f'"""{words_sentence(ctx, 8)}"""', "", "from __future__ import annotations", ""]
    for _ in range(ctx.rng.randint(3, 8)):
        lines.append(ctx.choice([f"import {ctx.choice(['json', 'logging', 'time', 'os', 'uuid', 'decimal', 'datetime', 'typing'])}",
                                 f"from {ctx.project['pkg']}.{ctx.choice(['core', 'models', 'utils'])} import {ctx.camel(2)}"]))
    lines += ["", "logger = logging.getLogger(__name__)", ""]
    for _ in range(ctx.rng.randint(1, 4)):
        lines.append(f"{ctx.choice(NOUNS).upper()}_{ctx.choice(NOUNS).upper()} = {ctx.rng.randint(1, 9000)}")
    size = sum(len(l) + 1 for l in lines)
    while size < target_chars:
        block = [""]
        if ctx.chance(0.2):
            cls = ctx.camel(2)
            block += [f"class {cls}:", f'    """{words_sentence(ctx, 7)}"""', ""]
            for _ in range(ctx.rng.randint(1, 3)):
                block.append(f"    def {ctx.ident(2)}(self, {ctx.choice(NOUNS)}: {ctx.camel(1)}) -> {ctx.choice(['None', 'bool', 'int', 'dict'])}:")
                for _ in range(ctx.rng.randint(2, 6)):
                    block += py_statement(ctx, "        ")
                block.append(f"        return {ctx.choice(['None', 'True', 'result', 'self._' + ctx.choice(NOUNS)])}")
                block.append("")
        else:
            block.append(f"def {ctx.ident(2)}({ctx.choice(NOUNS)}: {ctx.camel(1)}, *, {ctx.choice(NOUNS)}: int = {ctx.rng.randint(0, 100)}) -> {ctx.choice(['None', 'bool', 'list[dict]', ctx.camel(1)])}:")
            block.append(f'    """{words_sentence(ctx, ctx.rng.randint(5, 12))}"""')
            for _ in range(ctx.rng.randint(3, 10)):
                block += py_statement(ctx, "    ")
            block.append(f"    return {ctx.choice(NOUNS)}")
        lines += block
        size += sum(len(l) + 1 for l in block)
    if inject:
        lines = _insert_mid(lines, inject, ctx)
    if numbered:
        lines = [f"{i + 1:>5}  {l}" for i, l in enumerate(lines)]
    return "\n".join(lines)


def gen_traceback(ctx: Ctx, exc_line: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for _ in range(ctx.rng.randint(3, 7)):
        f = ctx.choice(ctx.project["files"])
        out.append(f'  File "/app/{f}", line {ctx.rng.randint(10, 900)}, in {ctx.ident(2)}')
        out.append(f"    {ctx.ident(2)}({ctx.choice(NOUNS)}, {ctx.choice(NOUNS)})")
    out.append(exc_line)
    return out


def gen_pytest(ctx: Ctx, target_chars: int, fail_block: list[str] | None = None, failing_test: str | None = None) -> tuple[str, bool]:
    tests = ctx.project["tests"]
    lines = [f"============================= test session starts ==============================",
             f"platform linux -- Python 3.11.{ctx.rng.randint(2, 9)}, pytest-8.{ctx.rng.randint(0, 3)}.{ctx.rng.randint(0, 5)}, pluggy-1.5.0",
             f"rootdir: /app", f"plugins: {ctx.choice(['xdist-3.5.0, ', ''])}cov-5.0.0, asyncio-0.23.{ctx.rng.randint(1, 7)}",
             f"collected {ctx.rng.randint(120, 900)} items", ""]
    n = max(10, target_chars // 75)
    distract_fail = fail_block is None and ctx.chance(0.3)
    failed = []
    for i in range(n):
        t = f"{ctx.choice(tests)}::test_{ctx.ident(2)}"
        status = "PASSED"
        if distract_fail and ctx.chance(0.03):
            status = "FAILED"
            failed.append(t)
        elif ctx.chance(0.02):
            status = "SKIPPED"
        lines.append(f"{t} {status} [{int(100 * (i + 1) / n):>3}%]")
    if failing_test:
        lines = _insert_mid(lines, [f"{failing_test} FAILED [ 50%]"], ctx)
        failed.append(failing_test)
    if failed:
        lines += ["", "=================================== FAILURES ==================================="]
        for t in failed:
            lines.append(f"_____________________________ {t.split('::')[-1]} _____________________________")
            if t == failing_test and fail_block:
                lines += fail_block
            else:
                lines += [f"    def {t.split('::')[-1]}():",
                          f">       assert {ctx.ident(2)}({ctx.choice(NOUNS)}) == {ctx.rng.randint(0, 99)}",
                          f"E       AssertionError: assert {ctx.rng.randint(100, 999)} == {ctx.rng.randint(0, 99)}",
                          f"{ctx.choice(tests)}:{ctx.rng.randint(10, 400)}: AssertionError"]
    dur = f"{ctx.rng.uniform(5, 300):.2f}s"
    if failed:
        lines.append(f"=========== {len(failed)} failed, {n - len(failed)} passed in {dur} ===========")
    else:
        lines.append(f"=========== {n} passed in {dur} ===========")
    return "\n".join(lines), bool(failed)


def gen_grep(ctx: Ctx, pattern: str, target_chars: int, inject: list[str] | None = None) -> str:
    lines = []
    size = 0
    while size < target_chars:
        f = ctx.choice(ctx.project["files"])
        l = f"{f}:{ctx.rng.randint(1, 1200)}:    {ctx.choice(py_statement(ctx, '')).strip()}"
        lines.append(l)
        size += len(l) + 1
    if inject:
        lines = _insert_mid(lines, inject, ctx)
    return "\n".join(lines)


def gen_deploy_log(ctx: Ctx, service: str, env: str, target_chars: int, inject: list[str] | None = None,
                   fail_lines: list[str] | None = None) -> str:
    t = ctx.ts()[:11]
    clock = [ctx.rng.randint(8, 20), ctx.rng.randint(0, 59), 0]

    def stamp():
        clock[2] += ctx.rng.randint(0, 9)
        if clock[2] >= 60:
            clock[2] -= 60
            clock[1] += 1
        if clock[1] >= 60:
            clock[1] -= 60
            clock[0] = (clock[0] + 1) % 24
        return f"{t}{clock[0]:02d}:{clock[1]:02d}:{clock[2]:02d}Z"

    steps = [f"Resolving build context for {service}",
             f"Step {{n}}/{{m}} : RUN pip install --no-cache-dir -r requirements.txt",
             "Step {n}/{m} : COPY src/ /app/src/",
             "Pushing layer sha256:{h}",
             "Layer sha256:{h} already exists",
             f"Applying manifest deploy/{service}/deployment.yaml",
             "Waiting for rollout: {k} of {r} updated replicas are available",
             "Readiness probe succeeded for pod {svc}-{p}",
             "Health check GET /healthz -> 200 in {ms}ms",
             "Scaling replica set {svc}-{p} to {r}",
             "Pulling image registry.internal/{svc}:{tag}",
             "Warming caches: {k} keys loaded"]
    lines = [f"{stamp()} INFO  deploy started service={service} env={env} region={ctx.choice(FILLER_REGIONS)}"]
    size = len(lines[0])
    m = ctx.rng.randint(12, 30)
    n = 0
    while size < target_chars:
        n += 1
        s = ctx.choice(steps).format(n=n % m + 1, m=m, h=ctx.hexs(64), k=ctx.rng.randint(1, 6), r=ctx.rng.randint(3, 8),
                                     svc=service, p=ctx.alnum(5), ms=ctx.rng.randint(3, 300), tag=ctx.hexs(12))
        l = f"{stamp()} {ctx.choice(['INFO ', 'INFO ', 'INFO ', 'DEBUG', 'WARN '])} {s}"
        lines.append(l)
        size += len(l) + 1
    if inject:
        lines = _insert_mid(lines, [f"{stamp()} INFO  {x}" for x in inject], ctx)
    if fail_lines:
        lines += [f"{stamp()} ERROR {x}" for x in fail_lines]
        lines.append(f"{stamp()} ERROR deploy failed service={service} env={env}; rolling back to previous revision")
    else:
        lines.append(f"{stamp()} INFO  deploy finished service={service} env={env} status=success")
    return "\n".join(lines)


def gen_diff(ctx: Ctx, path: str) -> str:
    start = ctx.rng.randint(10, 600)
    lines = [f"Applied edit to {path}", f"--- a/{path}", f"+++ b/{path}", f"@@ -{start},14 +{start},{14 + ctx.rng.randint(-3, 6)} @@"]
    for _ in range(ctx.rng.randint(14, 40)):
        p = ctx.choice([" ", " ", " ", "-", "+"])
        lines.append(p + ctx.choice(py_statement(ctx, "    ")))
    lines.append(f"1 file changed, {ctx.rng.randint(1, 20)} insertions(+), {ctx.rng.randint(0, 12)} deletions(-)")
    return "\n".join(lines)


COLS = {
    "week_start": lambda c: c.date(), "day": lambda c: c.date(),
    "country": lambda c: c.choice(["DE", "FR", "US", "GB", "BR", "IN", "JP", "ES", "IT", "NL", "MX", "CA"]),
    "plan": lambda c: c.choice(["free", "starter", "pro", "team", "enterprise"]),
    "channel": lambda c: c.choice(["organic", "paid_search", "referral", "email", "social", "direct"]),
    "active_users": lambda c: str(c.rng.randint(100, 90000)),
    "sessions": lambda c: str(c.rng.randint(100, 500000)),
    "orders": lambda c: str(c.rng.randint(0, 9000)),
    "revenue": lambda c: f"{c.rng.uniform(10, 250000):.2f}",
    "arpu": lambda c: f"{c.rng.uniform(1, 90):.3f}",
    "conversion_rate": lambda c: f"{c.rng.uniform(0, 0.2):.4f}",
    "churned": lambda c: c.choice(["t", "f"]),
    "user_id": lambda c: "u_" + c.digits(7),
    "account_id": lambda c: "acc_" + c.alnum(8),
    "retention_d30": lambda c: f"{c.rng.uniform(0.05, 0.7):.3f}",
    "device": lambda c: c.choice(["ios", "android", "web", "desktop"]),
    "latency_p95_ms": lambda c: str(c.rng.randint(40, 3000)),
    "tickets": lambda c: str(c.rng.randint(0, 400)),
}


def gen_sql_table(ctx: Ctx, target_chars: int, inject_row: dict | None = None, style=None,
                  extra_cols: dict | None = None) -> tuple[str, str]:
    """Returns (sql, rendered result).  extra_cols: {name: value_fn} for columns outside COLS;
    inject_row: {column: value} for one row placed mid-table."""
    gens = dict(COLS)
    gens.update(extra_cols or {})
    cols = ctx.rng.sample(list(COLS), ctx.rng.randint(4, 8))
    for k in list(extra_cols or {}) + list(inject_row or {}):
        if k not in cols:
            cols.insert(ctx.rng.randint(0, len(cols)), k)
    table = ctx.choice(ctx.project["tables"])
    sql = (f"SELECT {', '.join(cols)} FROM analytics.{table} WHERE {ctx.choice(['day', 'week_start'])} >= "
           f"'{ctx.date()}' {ctx.choice(['ORDER BY 1', 'ORDER BY 2 DESC', ''])} LIMIT {ctx.rng.randint(50, 5000)}")
    rows = []
    size = 0
    rowlen = 12 * len(cols)
    n = max(3, target_chars // rowlen)
    for _ in range(n):
        row = [gens[c](ctx) for c in cols]
        rows.append(row)
    if inject_row:
        at = ctx.rng.randint(len(rows) // 4, max(len(rows) // 4, 3 * len(rows) // 4))
        rows.insert(at, [inject_row.get(c) or gens[c](ctx) for c in cols])
    style = style or ctx.choice(["psql", "psql", "csv", "markdown"])
    if style == "csv":
        out = [",".join(cols)] + [",".join(r) for r in rows]
    elif style == "markdown":
        out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"] + \
              ["| " + " | ".join(r) + " |" for r in rows]
    else:
        w = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        out = [" " + " | ".join(c.ljust(w[i]) for i, c in enumerate(cols)),
               "-" + "-+-".join("-" * w[i] for i in range(len(cols))) + "-"]
        out += [" " + " | ".join(r[i].rjust(w[i]) for i in range(len(cols))) for r in rows]
        out.append(f"({len(rows)} rows)")
    return sql, "\n".join(out)


def gen_api_json(ctx: Ctx, target_chars: int) -> str:
    items = []
    size = 0
    while size < target_chars:
        it = {"id": ctx.uniq(lambda: f"cmp_{ctx.alnum(10)}"), "name": f"{ctx.choice(ADJS)} {ctx.choice(NOUNS)} {ctx.rng.randint(1, 99)}",
              "status": ctx.choice(["active", "paused", "archived"]), "impressions": ctx.rng.randint(0, 10 ** 6),
              "clicks": ctx.rng.randint(0, 50000), "spend": round(ctx.rng.uniform(0, 20000), 2),
              "updated_at": ctx.ts()}
        items.append(it)
        size += 210
    body = {"object": "list", "data": items,
            "paging": {"cursor": ctx.alnum(32), "has_more": ctx.chance(0.5)}, "request_id": f"req_{ctx.alnum(20)}"}
    return json.dumps(body, indent=ctx.choice([None, 2]))


def gen_order_json(ctx: Ctx, target_chars: int, order_id: str, extra: dict | None = None, extra_event: dict | None = None) -> str:
    cust = {"id": ctx.uniq(lambda: "CUS-" + ctx.alnum(6, True)), "name": ctx.person(),
            "email": f"{ctx.choice(FIRST).lower()}.{ctx.choice(LAST).lower()}{ctx.rng.randint(1, 99)}@example.com",
            "tier": ctx.choice(["standard", "plus", "vip"])}
    items = [{"sku": f"SKU-{ctx.alnum(6, True)}", "title": f"{ctx.choice(ADJS).title()} {ctx.choice(NOUNS).title()} {ctx.choice(['Kit', 'Pro', 'Mini', 'XL', 'Set'])}",
              "qty": ctx.rng.randint(1, 4), "unit_price": f"{ctx.rng.uniform(5, 400):.2f}"} for _ in range(ctx.rng.randint(1, 5))]
    events = []
    body = {"order_id": order_id, "status": ctx.choice(["shipped", "in_transit", "delivered", "processing", "exception"]),
            "placed_at": ctx.ts(), "customer": cust, "items": items,
            "payment": {"method": ctx.choice(["card", "paypal", "klarna"]), "captured": f"{ctx.rng.uniform(20, 900):.2f}",
                        "currency": "USD"},
            "shipments": [{"carrier": ctx.choice(["UPS", "DHL", "FedEx", "USPS", "PostNL"]),
                           "tracking": ctx.uniq(lambda: "TRK" + ctx.digits(12)), "events": events}],
            "notes": []}
    if extra:
        body.update(extra)
    size = len(json.dumps(body))
    while size < target_chars:
        ev = {"at": ctx.ts(), "location": f"{ctx.choice(CITIES)} {ctx.choice(['hub', 'depot', 'sort center', 'facility'])}",
              "status": ctx.choice(["arrived", "departed", "in transit", "out for delivery", "label created", "customs hold"])}
        events.append(ev)
        size += 110
        if ctx.chance(0.08):
            body["notes"].append({"by": ctx.person(), "at": ctx.ts(), "text": words_sentence(ctx, ctx.rng.randint(6, 16))})
            size += 140
    if extra_event:
        events.insert(ctx.rng.randint(len(events) // 4, max(len(events) // 4, 3 * len(events) // 4)), extra_event)
    return json.dumps(body, indent=ctx.choice([None, 2]))


def gen_crm_json(ctx: Ctx, target_chars: int, query: str, inject: dict | None = None) -> str:
    results = []
    size = 0
    while size < target_chars:
        r = {"customer_id": ctx.uniq(lambda: "CUS-" + ctx.alnum(6, True)), "name": ctx.person(),
             "city": ctx.choice(CITIES), "lifetime_value": f"{ctx.rng.uniform(0, 9000):.2f}",
             "open_tickets": ctx.rng.randint(0, 4),
             "recent_tickets": [{"ticket": ctx.uniq(lambda: "TCK-" + ctx.digits(6)), "subject": words_sentence(ctx, ctx.rng.randint(3, 7)),
                                 "status": ctx.choice(["open", "pending", "solved", "closed"]), "updated": ctx.ts()}
                                for _ in range(ctx.rng.randint(0, 4))]}
        results.append(r)
        size += len(json.dumps(r)) + 8
    if inject:
        results.insert(ctx.rng.randint(len(results) // 4, max(len(results) // 4, 3 * len(results) // 4)), inject)
    return json.dumps({"query": query, "total": len(results), "results": results}, indent=ctx.choice([None, 2]))


def gen_search_results(ctx: Ctx, target_chars: int, query: str, inject: dict | None = None) -> str:
    res = []
    size = 0
    while size < target_chars:
        host = ctx.choice(["support.example.org", "community.shopfront.io", "docs.carrier-status.net", "forum.parcelhub.com",
                           "blog.retailops.dev", "www.consumer-rights.eu", "help.paygate.io"])
        r = {"title": f"{words_sentence(ctx, ctx.rng.randint(4, 9))[:-1]} - {host.split('.')[0]}",
             "url": f"https://{host}/{ctx.choice(['a', 'articles', 'kb', 't', 'posts'])}/{ctx.rng.randint(1000, 999999)}-{ctx.choice(NOUNS)}-{ctx.choice(NOUNS)}",
             "snippet": " ".join(words_sentence(ctx, ctx.rng.randint(8, 18)) for _ in range(2)),
             "published": ctx.date()}
        res.append(r)
        size += len(json.dumps(r))
    if inject:
        res.insert(ctx.rng.randint(0, max(0, len(res) // 2)), inject)
    if ctx.chance(0.5):
        return json.dumps({"query": query, "results": res}, indent=2)
    out = [f"Search results for: {query}", ""]
    for i, r in enumerate(res, 1):
        out += [f"{i}. {r['title']}", f"   {r['url']}", f"   {r['snippet']}", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------
# Prose
# --------------------------------------------------------------------------

USER_ASKS = {
    "coding": [
        "Can you look at why {test} keeps failing on CI?",
        "The {svc} build is red again. Could you dig in?",
        "Please refactor {file} so the {noun} handling is less tangled.",
        "We need to add {noun} validation to the {noun2} endpoint.",
        "Can you check whether {fn} is still used anywhere?",
        "Deploy the latest {svc} to staging and tell me if it comes up healthy.",
        "There's a perf regression in {fn}, p95 went from 80ms to 400ms. Any idea?",
        "Add a test for the {noun} edge case we talked about.",
        "Something in {file} is swallowing exceptions, can you find it?",
        "Rename {fn} to something saner and update the callers.",
        "Run the full test suite and summarise what's broken.",
        "Next up: the {noun} cache invalidation bug. Start with the logs.",
        "ok, now try deploying {svc} to the canary ring",
        "what does {fn} actually do? the name tells me nothing",
        "Let's get {test} green before lunch if we can.",
    ],
    "data": [
        "How did weekly active users move in {country} over the last quarter?",
        "Can you pull revenue by plan tier for the last 8 weeks?",
        "I need a chart of conversion rate by channel, split by device.",
        "Why did {noun} volume drop on the 14th? Something looks off.",
        "Check the {table} table for duplicates, please.",
        "Pull the campaign stats from the ads API and join them with our orders.",
        "What's our 30-day retention for the {plan} plan cohort?",
        "Can you sanity-check the numbers in the exec dashboard against the warehouse?",
        "Plot sessions vs orders for the last 90 days.",
        "Break down ARPU by country and plan, top 10 only.",
        "is latency correlated with churn? quick look is fine",
        "Let's redo the funnel with the corrected event names.",
        "Compare {country} and {country2} on tickets per 1k users.",
        "Look at the {table} table and tell me what the columns mean.",
    ],
    "support": [
        "Customer {name} says their order never arrived. Can you check?",
        "Someone is asking why they were charged twice. Look into it?",
        "Can you find the account for {name} in the CRM?",
        "A customer wants to return a {noun} kit bought last month, what are the options?",
        "The tracking page shows 'customs hold' for days. What does that mean for the customer?",
        "Draft a reply to {name} about the delayed shipment.",
        "Check the order history for the customer who emailed about the broken {noun}.",
        "Is there a known carrier outage in {city} right now?",
        "Send {name} an update on their refund status.",
        "{name} is asking whether the warranty covers water damage.",
        "new one: parcel marked delivered but customer says nothing at the door",
        "Can you look up what our policy says about late returns?",
        "This customer wants to change the shipping address after dispatch.",
    ],
}

USER_FOLLOWUPS = [
    "ok thanks. next thing:", "Great, that helps.", "Hmm, not quite what I expected.", "Nice.",
    "Alright.", "Thanks, that's useful.", "Got it.", "Interesting.", "ok", "Perfect, moving on.",
    "Cool, one more.", "Right, makes sense.", "That's what I suspected.", "Good catch.",
]

USER_LIST_FILLER = ["keep me posted", "check the logs first", "no need to be fancy", "ping me when done",
                    "let me know if anything looks weird", "screenshots are welcome", "keep it short",
                    "don't worry about the old tickets", "start with the obvious stuff"]

ASSISTANT_PRE = [
    "Let me take a look.", "I'll start by checking {thing}.", "Checking {thing} first.",
    "Let me pull {thing}.", "I'll look at {thing} and go from there.", "",
    "First I want to see {thing}.", "Good question, let me verify with {thing}.", "",
]

ASSISTANT_FINAL = [
    "Summary: {obs}. Next I'd {next}.",
    "Here's what I found: {obs}. I suggest we {next}.",
    "{obs}. If that looks right to you, I'll {next}.",
    "Done. {obs}. Want me to {next}?",
    "Short version: {obs}. The longer version is in the output above. Next step would be to {next}.",
    "I looked through the results. {obs}. I can {next} if you want.",
]

OBS = {
    "coding": ["the failure comes from a stale fixture in the {noun} tests", "two callers still pass the old {noun} signature",
               "the {noun} handler retries without backoff", "the test suite is green except for one flaky {noun} test",
               "the deploy is healthy on all replicas", "the regression lines up with the {noun} refactor",
               "the exception is swallowed in a bare except around the {noun} loop", "nothing else imports that module"],
    "data": ["the dip is concentrated in {country} on web", "the {plan} cohort retains noticeably better",
             "there are duplicate rows for about 2% of {noun}s", "the trend is flat once you remove the holiday week",
             "the dashboard and the warehouse agree within rounding", "conversion moved mostly in paid search",
             "the API numbers lag the warehouse by about a day"],
    "support": ["the parcel is stuck at the carrier's {city} depot", "the second charge is an authorization hold that will drop off",
                "the customer has two accounts with the same email", "the item is still inside the return window",
                "the carrier confirms a delay in {city}", "the refund was issued and should land in a few days",
                "the address change is no longer possible since the label was printed"],
}

NEXT = {
    "coding": ["patch the fixture and rerun the suite", "update the callers", "add a regression test", "deploy to staging",
               "open a follow-up for the flaky test", "bisect the last few commits"],
    "data": ["add a breakdown by device", "turn this into a weekly chart", "write the query up as a saved view",
             "check the raw events for the same window", "share the table with the team"],
    "support": ["send the customer an update", "open a claim with the carrier", "merge the duplicate accounts",
                "offer the standard options", "check back tomorrow"],
}


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def fill(ctx: Ctx, template: str) -> str:
    p = ctx.project
    return template.format(
        test=f"test_{ctx.ident(2)}", svc=p["service"], file=ctx.choice(p["files"]), noun=ctx.choice(NOUNS),
        noun2=ctx.choice(NOUNS), fn=ctx.ident(2), country=ctx.choice(["Germany", "Brazil", "Japan", "Spain", "Canada", "India"]),
        country2=ctx.choice(["France", "Mexico", "Italy", "the UK", "the US"]), table=ctx.choice(p["tables"]),
        plan=ctx.choice(["pro", "team", "starter"]), name=ctx.person(), city=ctx.choice(CITIES),
        thing=ctx.choice(["the logs", "the recent changes", "the data", "the order history", "the test output", "the config"]),
        obs=_cap(fill(ctx, ctx.choice(OBS[ctx.domain]))) if "{obs}" in template else "",
        next=ctx.choice(NEXT[ctx.domain]) if "{next}" in template else "",
    )


def user_prose(ctx: Ctx) -> str:
    parts = []
    if ctx.chance(0.4):
        parts.append(ctx.choice(USER_FOLLOWUPS))
    parts.append(fill(ctx, ctx.choice(USER_ASKS[ctx.domain])))
    if ctx.chance(0.35):
        parts.append(ctx.choice(DISTRACTORS[ctx.domain]))
    if ctx.chance(0.15):
        parts.append(ctx.choice(DISTRACTORS[ctx.domain]))
    return " ".join(parts)


# --------------------------------------------------------------------------
# Fact values and templates
# --------------------------------------------------------------------------

def money(ctx: Ctx) -> str:
    def one():
        sym = ctx.choice(["$", "$", "$", "€", "£"])
        v = ctx.rng.randint(3, 98) * 100 + ctx.choice([10, 15, 20, 25, 40, 45, 50, 60, 75, 80, 85, 90])
        return f"{sym}{v:,}"
    return ctx.uniq(one)


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]


def deadline(ctx: Ctx) -> str:
    def one():
        y = ctx.choice([2026, 2027])
        m = ctx.rng.randint(1, 12)
        d = ctx.rng.randint(1, 28)
        fmt = ctx.rng.randint(0, 3)
        if fmt == 0:
            return f"{y}-{m:02d}-{d:02d}"
        if fmt == 1:
            return f"{d} {MONTHS[m - 1]} {y}"
        if fmt == 2:
            return f"{MONTHS[m - 1]} {d}, {y}"
        return f"{d:02d}/{m:02d}/{y}"
    return ctx.uniq(one)


def gen_name(ctx: Ctx, parts: list[list[str]], sep="_") -> str:
    return ctx.uniq(lambda: sep.join(ctx.choice(p) for p in parts))


SYL = ["zor", "vek", "tal", "mir", "quo", "bran", "fex", "lum", "dri", "sko", "yen", "pax", "wol", "gri", "nax", "tev"]


def coined(ctx: Ctx, n=2, unique=True) -> str:
    fn = lambda: "".join(ctx.choice(SYL) for _ in range(n))
    return ctx.uniq(fn) if unique else fn()


class FactSpec:
    def __init__(self, kind, carrier, target):
        self.kind = kind
        self.carrier = carrier
        self.target = target


# ---- constraint -----------------------------------------------------------

def constraint_value(ctx: Ctx):
    """-> (sentences: list[str], checks: list[str], subtype)"""
    d = ctx.domain
    sub = ctx.choice(["spend", "spend", "region", "ban", "ban", "deadline", "deadline", "format"])
    if sub == "spend":
        amt = money(ctx)
        common = [
            f"Hard ceiling on spend for this whole thing is {amt}. Don't go past it.",
            f"Finance approved {amt} total, and that is the number, not a cent more.",
            f"Whatever you set up can't cost more than {amt} a month all-in.",
            f"We have {amt} to work with this quarter and it is a hard limit.",
            f"Anything that would push us over {amt} has to stop and come back to me first.",
            f"Cap: {amt}/mo. Non-negotiable.",
            f"Keep total spend at or below {amt}; procurement will bounce anything above that.",
            f"the approval I got was for {amt} max, so plan around that number",
        ]
        extra = {
            "coding": [f"The cloud bill for the new environment must stay under {amt} per month, full stop.",
                       f"Load testing is capped at {amt} of compute. Do not exceed it."],
            "data": [f"This analysis has a warehouse allowance of {amt}; queries past that get billed to my team and I can't cover it.",
                     f"Don't run anything that costs more than {amt} in scan fees in total."],
            "support": [f"You can't approve refunds or credits above {amt} on your own; those go to a supervisor.",
                        f"Goodwill credits are capped at {amt} per customer, no exceptions.",
                        f"Any compensation over {amt} needs sign-off from the duty manager."],
        }[d]
        return common + extra, [amt], sub
    if sub == "region":
        r = ctx.take("regions", BANNED_REGIONS)
        if r is None:
            return constraint_value(ctx)
        return [
            f"Nothing gets deployed to {r}. Legal hasn't cleared it.",
            f"Keep everything out of {r}; it's a data residency issue.",
            f"Do not spin anything up in {r}, not even temporarily.",
            f"{r} is off limits for us, so pick something else.",
            f"We're not allowed to store customer data in {r}.",
            f"Avoid {r} completely, last time it triggered an audit finding.",
            f"whatever region you choose, it cannot be {r}",
        ], [r], sub
    if sub == "ban":
        if d == "coding":
            lib = ctx.take("libs", CODE_LIBS_BANNED)
            if lib is None:
                return constraint_value(ctx)
            return [f"Don't add {lib} as a dependency under any circumstances.",
                    f"We can't use {lib}: licensing and security both said no.",
                    f"{lib} is banned in this repo after last year's incident.",
                    f"Please keep {lib} out of the dependency tree, even transitively if you can help it.",
                    f"No {lib}. I mean it."], [lib], sub
        if d == "data":
            t = gen_name(ctx, [["pii", "raw", "legacy", "tmp", "old"], ["clickstream", "billing", "identity", "geo", "support"],
                               ["v1", "v2", "2019", "backup", "full", "export"]])
            return [f"Do not query {t}; it's PII and we don't have sign-off.",
                    f"Stay away from {t}, that table is deprecated and its numbers are wrong.",
                    f"{t} is off limits for this analysis.",
                    f"Whatever you do, don't join against {t}; compliance flagged it.",
                    f"Never touch {t} in anything that ends up in front of execs."], [t], sub
        if ctx.chance(0.5):
            c = ctx.take("carriers", CARRIERS_BANNED) or coined(ctx).title() + " Freight"
            return [f"Don't route any shipments through {c}, we terminated the contract.",
                    f"No more {c} for replacements, ever.",
                    f"{c} is not an option for re-shipping anymore.",
                    f"We can't use {c} for this customer or anyone else right now."], [c], sub
        c = ctx.take("competitors", COMPETITORS) or coined(ctx).title()
        return [f"Never recommend {c} to customers, even if they ask directly.",
                f"Do not mention {c} in any reply.",
                f"Legal says we can't reference {c} in customer communications.",
                f"If they bring up {c}, don't engage with the comparison."], [c], sub
    if sub == "deadline":
        dl = deadline(ctx)
        common = [f"This has to be done by {dl}. No extensions.",
                  f"The hard deadline is {dl}; that's when the old system gets switched off.",
                  f"Deliverable due {dl}, end of day Pacific.",
                  f"We need it wrapped up before {dl} at the latest.",
                  f"{dl} is the drop-dead date for this."]
        extra = {"coding": [f"Code freeze starts {dl}; nothing merges after that.",
                            f"The migration must be finished by {dl} because the old cluster is decommissioned that day."],
                 "data": [f"The board deck locks on {dl}, so the final numbers must be in before then.",
                          f"Final report is due {dl}, no later."],
                 "support": [f"The customer has to have a resolution by {dl} or it escalates to legal.",
                             f"We promised an answer by {dl}; we have to keep that promise."]}[d]
        return common + extra, [dl], sub
    # format
    if ctx.chance(0.5):
        f = ctx.take("formats", FORMAT_POOL)
        if f is not None:
            return [f"The export must be {f}; the downstream loader won't accept anything else.",
                    f"Everything you hand over needs to be {f}. That's a requirement from the integration team.",
                    f"Output format is fixed: {f}. Don't improvise.",
                    f"Only {f} is acceptable for the deliverables."], [f], sub
    prefix = gen_name(ctx, [["rpt", "exp", "kpi", "ops", "fin", "cx"], ["weekly", "daily", "q3", "board", "audit", "recon"]])
    pat = f"{prefix}_YYYYMMDD_v{ctx.rng.randint(2, 9)}"
    return [f"All files you produce need to be named like {pat}.csv or the ingestion job ignores them.",
            f"File naming is mandatory: {pat}, nothing else.",
            f"Name every output {pat} with the right extension; the archive job depends on it."], [pat], "format"


# ---- preference -----------------------------------------------------------

def preference_value(ctx: Ctx):
    d = ctx.domain
    opts = ["tz", "lang", "currency", "greet", "nick", "datefmt", "font"]
    opts += {"coding": ["codestyle", "codestyle", "signoff"], "data": ["cmap", "cmap", "chartsize", "datatool", "datatool"],
             "support": ["signoff", "signoff", "greet"]}[d]
    sub = ctx.choice(opts)
    if sub == "tz":
        tz = ctx.take("tz", TIMEZONES)
        if tz is None:
            return preference_value(ctx)
        return [f"Times in {tz}, please; that's where I am.",
                f"I'm based in {tz}, so convert timestamps to that when you report back.",
                f"Could every timestamp you show me be in {tz} time?",
                f"Quick thing: I read everything in {tz}, UTC makes my head spin.",
                f"{tz} for times works best for me."], [tz], sub
    if sub == "lang":
        lang = ctx.take("lang", LANGUAGES)
        if lang is None:
            return preference_value(ctx)
        what = {"coding": "code comments and docstrings", "data": "chart titles and captions", "support": "replies to customers"}[d]
        return [f"For {what}, {lang} works best; most of the team reads it more comfortably.",
                f"My {lang} is better than my English, so {what} in {lang} would be easier for me.",
                f"Could you write {what} in {lang} from now on?",
                f"Default to {lang} for {what}, if you can."], [lang], sub
    if sub == "currency":
        c = ctx.take("cur", CURRENCIES)
        if c is None:
            return preference_value(ctx)
        code, name = c
        return [f"Show money amounts in {code}; our finance people think in {name}.",
                f"I'd find it easier if everything were converted to {name} ({code}).",
                f"{name} please for any amounts, I can't do the conversion in my head.",
                f"Our accounts are in {name}, so {code} figures would be ideal."], [name], sub
    if sub == "greet":
        g = ctx.take("greet", GREETINGS)
        if g is None:
            return preference_value(ctx)
        return [f"When you write to people for me, open with '{g}', it's a team tradition.",
                f"Start any emails you draft with '{g}'. People like it.",
                f"Little thing: greetings should be '{g}' rather than 'Hi'."], [g], sub
    if sub == "nick":
        nick = ctx.take("nick", NICKNAMES)
        if nick is None:
            return preference_value(ctx)
        return [f"By the way, just call me {nick}, everybody does.",
                f"You can call me {nick}; the full name feels formal.",
                f"(It's {nick}, not the full name, if you're addressing me.)"], [nick], sub
    if sub == "datefmt":
        f = ctx.take("datefmt", DATE_FORMATS)
        if f is None:
            return preference_value(ctx)
        return [f"Dates as {f}, please, that's how our team writes them.",
                f"I read dates as {f}; anything else confuses me.",
                f"Could you format dates {f} in whatever you send me?"], [f], sub
    if sub == "font":
        f = ctx.take("font", FONTS)
        if f is None:
            return preference_value(ctx)
        return [f"Anything visual should use {f}; it's the brand font.",
                f"If you make a doc or chart, {f} looks right to us.",
                f"Use {f} for text in documents. The default font looks off next to our slides."], [f], sub
    if sub == "signoff":
        name = ctx.uniq(lambda: f"{ctx.choice(FIRST)} from {ctx.choice(['Support', 'the Care Team', 'Customer Success', 'Platform', 'the Dev Team'])}")
        return [f"Sign anything you send as '{name}'.",
                f"Sign-off line should be '{name}', not the generic company footer.",
                f"Close messages with '{name}' so people know who to reply to."], [name], sub
    if sub == "codestyle":
        pair = ctx.take("codestyle", CODE_STYLE_PREFS)
        if pair is None:
            return preference_value(ctx)
        a, b = pair
        return [f"We're a {a} shop; {b} isn't something I want to see.",
                f"{a} over {b}, always.",
                f"Go with {a} by default, I find {b} painful.",
                f"Stick to {a}, please.",
                f"I'm much happier with {a} than {b}."], [a], sub
    if sub == "cmap":
        c = ctx.take("cmap", COLORMAPS)
        if c is None:
            return preference_value(ctx)
        return [f"For heatmaps, {c} is my go-to colormap; the default is unreadable for me.",
                f"Colour scale: {c}. I'm colourblind and it's the one that works.",
                f"Use the {c} palette for charts if you can."], [c], sub
    if sub == "chartsize":
        s = ctx.uniq(lambda: f"{ctx.rng.randint(90, 190) * 10 + ctx.choice([0, 5])}x{ctx.rng.randint(45, 110) * 10}")
        return [f"Charts at {s} fit our slides best.",
                f"Make the figures {s} pixels; they get pasted straight into the deck.",
                f"Export charts at {s}, the template expects that."], [s], sub
    pair = ctx.take("datatool", DATA_TOOL_PREFS)
    if pair is None:
        return preference_value(ctx)
    a, b = pair
    return [f"I think in {a}, so {a} over {b} for anything you hand me.",
            f"{a} please, I never got along with {b}.",
            f"Use {a} instead of {b} when there's a choice.",
            f"My team standardised on {a}; {b} code is hard for us to maintain."], [a], "datatool"


# ---- identifier -----------------------------------------------------------

def identifier_value(ctx: Ctx, force_sub: str | None = None):
    d = ctx.domain
    if d == "coding":
        sub = force_sub or ctx.choice(["commit", "jira", "pr", "uuid", "incident", "build"])
        v = {"commit": lambda: ctx.hexs(ctx.choice([9, 10, 12])),
             "jira": lambda: f"{ctx.choice(['PAY', 'CORE', 'PLAT', 'SRE', 'LEDG', 'CHK'])}-{ctx.digits(4)}",
             "pr": lambda: f"PR #{ctx.digits(5)}",
             "uuid": lambda: f"{ctx.hexs(8)}-{ctx.hexs(4)}-4{ctx.hexs(3)}-{ctx.choice('89ab')}{ctx.hexs(3)}-{ctx.hexs(12)}",
             "incident": lambda: f"INC-{ctx.digits(5)}",
             "build": lambda: f"build-{ctx.digits(6)}"}[sub]
        label = {"commit": "commit", "jira": "ticket", "pr": "pull request", "uuid": "trace id",
                 "incident": "incident", "build": "build"}[sub]
    elif d == "data":
        sub = force_sub or ctx.choice(["exp", "job", "dash", "seg", "uuid"])
        v = {"exp": lambda: f"EXP-{ctx.digits(4)}", "job": lambda: f"job_{ctx.hexs(14)}",
             "dash": lambda: f"dash-{ctx.alnum(9)}", "seg": lambda: f"seg_{ctx.alnum(10)}",
             "uuid": lambda: f"{ctx.hexs(8)}-{ctx.hexs(4)}-4{ctx.hexs(3)}-{ctx.choice('89ab')}{ctx.hexs(3)}-{ctx.hexs(12)}"}[sub]
        label = {"exp": "experiment", "job": "query job", "dash": "dashboard", "seg": "segment", "uuid": "dataset version"}[sub]
    else:
        sub = force_sub or ctx.choice(["order", "order", "ticket", "customer", "rma", "invoice", "refund"])
        v = {"order": lambda: f"ORD-{ctx.digits(5)}", "ticket": lambda: f"TCK-{ctx.digits(6)}",
             "customer": lambda: f"CUS-{ctx.alnum(6, True)}", "rma": lambda: f"RMA-{ctx.digits(5)}",
             "invoice": lambda: f"INV-2025-{ctx.digits(5)}", "refund": lambda: f"re_{ctx.alnum(14)}"}[sub]
        label = {"order": "order", "ticket": "ticket", "customer": "customer id", "rma": "RMA number",
                 "invoice": "invoice", "refund": "refund id"}[sub]
    val = ctx.uniq(v)
    return val, label, sub


def identifier_user_sentences(val, label):
    return [f"The {label} in question is {val}.",
            f"{label.capitalize()}: {val}, in case you need it.",
            f"It's filed under {val}.",
            f"ref {val}",
            f"Use {val} when you refer to this {label} anywhere.",
            f"For the record the {label} is {val}; we'll need it later.",
            f"Oh and the {label} is {val}, I should've said that up front.",
            f"Keep {val} handy, that's the {label} everyone's asking about."]


def identifier_assistant_sentences(val, label):
    return [f"I've logged this under {val} so we can track it.",
            f"For reference, the {label} we're dealing with is {val}.",
            f"Noting the {label} here: {val}. I'll use it for the follow-up checks.",
            f"The relevant {label} turned out to be {val}.",
            f"I'll refer to this as {val} from here on."]


# ---- path -----------------------------------------------------------------

def path_value(ctx: Ctx, style: str | None = None):
    """style: None (any), 'object' (s3/gs object), 'image' (a rendered chart file)."""
    d = ctx.domain
    if style == "object":
        return ctx.uniq(lambda: f"{ctx.choice(['s3', 'gs'])}://{ctx.project['corp']}-{coined(ctx, 2, unique=False)}/exports/"
                                f"{ctx.choice([2025, 2026])}/{coined(ctx, 2, unique=False)}_{ctx.choice(['cohorts', 'funnel', 'ltv', 'spend'])}.parquet")
    if style == "image":
        return ctx.uniq(lambda: f"/mnt/shared/{ctx.choice(['growth', 'finance', 'bi'])}/charts/{coined(ctx, 2, unique=False)}_"
                                f"{ctx.choice(NOUNS)}_{ctx.choice(['weekly', 'daily', 'trend'])}.png")
    p = ctx.project
    c = coined(ctx, 2, unique=False)
    if d == "coding":
        opts = [lambda: f"src/{p['pkg']}/{ctx.choice(['billing', 'ledger', 'settlement', 'payouts'])}/{c}_{ctx.choice(NOUNS)}.py",
                lambda: f"deploy/helm/{c}/values-{ctx.choice(['prod', 'canary', 'perf'])}.yaml",
                lambda: f"https://grafana.{p['corp']}.net/d/{ctx.alnum(9)}/{c}-{ctx.choice(['latency', 'errors', 'saturation'])}",
                lambda: f"s3://{p['corp']}-{c}-artifacts/releases/{ctx.digits(4)}/{c}.tar.gz",
                lambda: f"/etc/{c}/{ctx.choice(['runtime', 'limits', 'flags'])}.toml",
                lambda: f"docs/runbooks/{c}-{ctx.choice(['failover', 'rollback', 'restore'])}.md"]
    elif d == "data":
        opts = [lambda: f"s3://{p['corp']}-analytics/exports/{ctx.choice([2025, 2026])}/{c}_{ctx.choice(['cohorts', 'funnel', 'ltv'])}.parquet",
                lambda: f"gs://{p['corp']}-{c}/warehouse/{ctx.choice(['daily', 'weekly'])}/{ctx.date()}/part-0000{ctx.rng.randint(0, 9)}.csv.gz",
                lambda: f"https://metabase.{p['corp']}.io/question/{ctx.digits(4)}-{c}-{ctx.choice(['revenue', 'retention', 'churn'])}",
                lambda: f"models/marts/{ctx.choice(['finance', 'growth', 'product'])}/fct_{c}.sql",
                lambda: f"/mnt/shared/{ctx.choice(['growth', 'finance', 'bi'])}/{c}_analysis.ipynb",
                lambda: f"https://api.{c}.io/v{ctx.rng.randint(2, 4)}/reports/{ctx.choice(['spend', 'conversions', 'cohorts'])}"]
    else:
        opts = [lambda: f"https://help.{p['corp']}.com/hc/articles/{ctx.digits(9)}-{c}-{ctx.choice(['returns', 'warranty', 'shipping'])}",
                lambda: f"s3://{p['corp']}-support/return-labels/{c}-{ctx.digits(6)}.pdf",
                lambda: f"https://status.{c}.com/incidents/{ctx.alnum(12)}",
                lambda: f"/policies/{c}-{ctx.choice(['refund', 'exchange', 'compensation'])}-policy.pdf",
                lambda: f"https://{p['corp']}.zendesk.com/agent/macros/{ctx.digits(8)}-{c}"]
    return ctx.uniq(ctx.choice(opts))


def path_user_sentences(val):
    return [f"The file you want is {val}.",
            f"Everything should go to {val}, not the old location.",
            f"It lives at {val} (don't confuse it with the copy in the repo root).",
            f"Use {val} as the source of truth.",
            f"link: {val}",
            f"The one I keep open all day is {val}.",
            f"Write the output to {val} when you're done.",
            f"Bookmark {val}, we'll come back to it."]


def path_assistant_sentences(val):
    return [f"I'll write the results to {val}.",
            f"The piece that matters is at {val}.",
            f"Saved it to {val} so we don't have to regenerate it.",
            f"For later: the authoritative copy is {val}.",
            f"The relevant location is {val}; everything else is a stale copy."]


# ---- error ----------------------------------------------------------------

def error_value(ctx: Ctx):
    """-> (code, exc_name_or_None, message)"""
    d = ctx.domain
    exc = ctx.uniq(lambda: "".join(w.capitalize() for w in ctx.rng.sample(EXC_WORDS, 2)) +
                   ctx.choice(["Error", "Exception", "Fault"]))
    if d == "coding":
        code = ctx.uniq(lambda: ctx.choice([f"E{ctx.digits(4)}", f"ERR_{ctx.choice(['DPL', 'MIG', 'CHK', 'LDG'])}_{ctx.digits(4)}",
                                             f"DPL-{ctx.digits(4)}", f"0x{ctx.hexs(6).upper()}"]))
        msg = ctx.choice(["readiness probe failed after 30 attempts", "balance drift exceeds tolerance",
                          "migration lock held by another process", "checksum mismatch on artifact",
                          "lease expired while holding shard", "schema version ahead of binary"])
    elif d == "data":
        code = ctx.uniq(lambda: ctx.choice([f"WH-{ctx.digits(5)}", f"SQL{ctx.digits(5)}", f"Q_ERR_{ctx.digits(4)}",
                                             f"API-{ctx.choice(['429', '403', '502'])}-{ctx.digits(4)}"]))
        msg = ctx.choice(["resources exceeded during query execution", "permission denied on dataset",
                          "division by zero in window aggregate", "quota for export jobs exhausted",
                          "upstream report endpoint timed out", "column ambiguously defined in join"])
    else:
        code = ctx.uniq(lambda: ctx.choice([f"PGW-{ctx.digits(4)}", f"MAIL-{ctx.choice(['550', '552', '554'])}-{ctx.digits(4)}",
                                             f"OSE-{ctx.digits(4)}", f"CRM-{ctx.digits(5)}"]))
        msg = ctx.choice(["refund window closed for this capture", "recipient mailbox unavailable",
                          "order is locked by a pending claim", "address validation failed",
                          "duplicate payment reference", "customer record is merged into another"])
    use_exc = ctx.chance(0.5)
    return code, exc if use_exc else None, msg


# ---- decision -------------------------------------------------------------

def decision_value(ctx: Ctx):
    d = ctx.domain
    pool = {"coding": CODING_DECISIONS, "data": DATA_DECISIONS, "support": SUPPORT_DECISIONS}[d]
    pair = ctx.take("decisions", pool)
    if pair is not None and ctx.chance(0.65):
        return pair
    # generated options, guaranteed unique
    if d == "coding":
        flag = ctx.uniq(lambda: f"ff_{ctx.choice(NOUNS)}_{coined(ctx, 1, unique=False)}_v{ctx.rng.randint(2, 9)}")
        x, y = ctx.choice([(f"gating it behind the feature flag {flag}", "shipping it unflagged"),
                           (f"rolling out through the {flag} flag at 5%", "a direct 100% rollout")])
        return x, y, flag
    if d == "data":
        mv = ctx.uniq(lambda: f"mv_{ctx.choice(['weekly', 'daily', 'monthly'])}_{ctx.choice(NOUNS)}_{coined(ctx, 1, unique=False)}")
        x, y = ctx.choice([(f"a materialized view called {mv}", "re-querying raw events every time"),
                           (f"precomputing into {mv}", "computing it on the fly in the dashboard")])
        return x, y, mv
    amt = money(ctx)
    x, y = ctx.choice([(f"store credit of {amt}", "a cash refund"),
                       (f"a one-off courtesy payment of {amt}", "a replacement unit")])
    return x, y, amt


def decision_sentences(x, y, who):
    if who == "assistant":
        return [f"Given the constraints, I'll go with {x} rather than {y}.",
                f"Decision: {x}. {y[0].upper() + y[1:]} would cost us more later.",
                f"We're settled on {x}; I'm dropping the idea of {y}.",
                f"Plan of record from here: {x} (not {y}).",
                f"After weighing both, {x} wins over {y}, so that's what I'll implement."]
    return [f"OK let's do {x}, forget {y}.",
            f"Go with {x}.",
            f"I talked to the team: {x} it is.",
            f"{y[0].upper() + y[1:]} is out; we're doing {x}.",
            f"Final answer: {x}. I don't want to revisit {y}.",
            f"yeah {x} makes more sense than {y}, let's lock that in"]


# --------------------------------------------------------------------------
# Rendering facts into carriers
# --------------------------------------------------------------------------

def embed_user(ctx: Ctx, fact_sentence: str) -> str:
    """Places a fact sentence inside a user message, in varied structures."""
    style = ctx.rng.randint(0, 8)
    ask = user_prose(ctx)
    if style == 0:
        return fact_sentence
    if style == 1:
        return f"{ask} {fact_sentence}"
    if style == 2:
        return f"{fact_sentence} {ask}"
    if style == 3:
        items = ctx.rng.sample(USER_LIST_FILLER, 3)
        items.insert(ctx.rng.randint(0, 3), fact_sentence)
        return f"{ask}\n\nA few things:\n" + "\n".join(f"- {i}" for i in items)
    if style == 4:
        items = ctx.rng.sample(USER_LIST_FILLER, 2)
        items.insert(ctx.rng.randint(0, 2), fact_sentence)
        return f"{ask}\n" + "\n".join(f"{n}. {i}" for n, i in enumerate(items, 1))
    if style == 5:
        return f"{ask}\n\nPS: {fact_sentence}"
    if style == 6:
        return f"Forwarding this from {ctx.person()}:\n> {fact_sentence}\n\n{ask}"
    if style == 7:
        d1 = ctx.choice(DISTRACTORS[ctx.domain])
        return f"{d1} Anyway. {fact_sentence} {ask}"
    return f"{ask}\n\n{pasted_block(ctx)}\n\n{fact_sentence}"


def pasted_block(ctx: Ctx) -> str:
    """A chunk the user pastes from their screen (log lines, a table, a snippet)."""
    r = ctx.rng.random()
    if ctx.domain == "support":
        who = ctx.person()
        lines = [f"From: {who} <{who.split()[0].lower()}@example.com>", f"Subject: {ctx.choice(['Where is my order', 'Charged twice', 'Broken item', 'Return request', 'Wrong size'])}", ""]
        lines += [words_sentence(ctx, ctx.rng.randint(12, 30)) for _ in range(ctx.rng.randint(2, 6))]
        return "\n".join("> " + l for l in lines)
    if ctx.domain == "data" and r < 0.7:
        r = 0.8
    if r < 0.4:
        body = gen_deploy_log(ctx, ctx.project["service"], ctx.choice(["staging", "prod"]), ctx.size_chars(60, 400, "log"))
    elif r < 0.7:
        body = gen_grep(ctx, ctx.ident(2), ctx.size_chars(60, 300, "code"))
    else:
        body = gen_sql_table(ctx, ctx.size_chars(60, 400, "table"), style="csv")[1]
    return "```\n" + body + "\n```"


def embed_assistant(ctx: Ctx, fact_sentence: str) -> str:
    style = ctx.rng.randint(0, 3)
    final = fill(ctx, ctx.choice(ASSISTANT_FINAL))
    if style == 0:
        return f"{final}\n\n{fact_sentence}"
    if style == 1:
        return f"{fact_sentence} {final}"
    if style == 2:
        obs = [fill(ctx, ctx.choice(OBS[ctx.domain])) for _ in range(2)]
        return "Findings so far:\n" + "\n".join(f"- {o}" for o in obs) + f"\n- {fact_sentence}\n\n" + fill(ctx, "Next I'd {next}.")
    return f"{_cap(fill(ctx, ctx.choice(OBS[ctx.domain])))}, which matches what we saw earlier. {fact_sentence} {fill(ctx, 'I can {next} next.')}"


class ToolCall:
    def __init__(self, name, args, content, failed=False):
        self.name = name
        self.args = args
        self.content = content
        self.failed = failed


def tool_error_block(ctx: Ctx, code, exc, msg):
    """Error text lines for a failing tool, in the domain's style."""
    if exc:
        head = f"{ctx.project['pkg']}.errors.{exc}: [{code}] {msg}"
    else:
        head = f"Error {code}: {msg}"
    return head


def render_tool_fact(ctx: Ctx, kind: str):
    """-> (ToolCall, checks, text, follow_up_sentence)"""
    d = ctx.domain
    p = ctx.project
    if kind == "error":
        code, exc, msg = error_value(ctx)
        checks = [code] + ([exc] if exc else [])
        head = tool_error_block(ctx, code, exc, msg)
        if d == "coding":
            if ctx.chance(0.5):
                tb = gen_traceback(ctx, head)
                test = f"{ctx.choice(p['tests'])}::test_{ctx.ident(2)}"
                content, _ = gen_pytest(ctx, ctx.size_chars(400, 3000, "log"), fail_block=["    " + l for l in tb], failing_test=test)
                tc = ToolCall("run_tests", {"target": test.split("::")[0], "verbose": True}, content, True)
            else:
                env = ctx.choice(["staging", "canary", "prod"])
                content = gen_deploy_log(ctx, p["service"], env, ctx.size_chars(300, 2500, "log"), fail_lines=gen_traceback(ctx, head))
                tc = ToolCall("deploy", {"service": p["service"], "env": env}, content, True)
        elif d == "data":
            if ctx.chance(0.5):
                sql, _ = gen_sql_table(ctx, 200)
                content = json.dumps({"status": "error", "error": {"code": code, "type": exc or "QueryError", "message": msg,
                                                                   "query": sql, "job": f"job_{ctx.hexs(14)}",
                                                                   "stats": {"bytes_scanned": ctx.rng.randint(10 ** 8, 10 ** 11),
                                                                             "elapsed_ms": ctx.rng.randint(100, 90000)}}}, indent=2)
                content += "\n\nPartial execution log:\n" + gen_deploy_log(ctx, "warehouse", "analytics", ctx.size_chars(200, 1500, "log"))
                tc = ToolCall("sql_query", {"sql": sql}, content, True)
            else:
                url = f"https://api.{p['corp']}-ads.com/v3/reports?since={ctx.date()}"
                content = json.dumps({"status": int(code.split('-')[1]) if code.startswith("API-") else ctx.choice([400, 403, 500, 502]),
                                      "error": {"code": code, "exception": exc, "message": msg,
                                                "trace": gen_traceback(ctx, head)}, "request_id": f"req_{ctx.alnum(20)}"}, indent=2)
                tc = ToolCall("http_get", {"url": url}, content, True)
        else:
            if ctx.chance(0.5):
                to = f"{ctx.choice(FIRST).lower()}{ctx.rng.randint(1, 999)}@example.net"
                content = json.dumps({"status": "failed", "error": {"code": code, "exception": exc, "message": msg,
                                                                    "smtp_transcript": [f"{ctx.ts()} {ctx.choice(['EHLO', 'MAIL FROM', 'RCPT TO', 'DATA'])} {words_sentence(ctx, 4)}" for _ in range(ctx.rng.randint(8, 30))]},
                                      "to": to}, indent=2)
                tc = ToolCall("send_email", {"to": to, "subject": f"Update on your {ctx.choice(NOUNS)}", "body": words_sentence(ctx, 30)}, content, True)
            else:
                oid = ctx.uniq(lambda: f"ORD-{ctx.digits(5)}")
                content = json.dumps({"ok": False, "error": {"code": code, "exception": exc, "message": msg},
                                      "diagnostics": [f"{ctx.ts()} {words_sentence(ctx, 8)}" for _ in range(ctx.rng.randint(10, 40))]}, indent=2)
                tc = ToolCall("lookup_order", {"order_id": oid}, content, True)
        follow = ctx.choice(["That call failed; the error above is the real blocker.",
                             "It failed. I'll need to work around that error before going further.",
                             "Failure on that one. Noting the error code for the writeup.",
                             "That didn't go through, see the error in the output."])
        return tc, checks, head, follow
    if kind == "identifier":
        val, label, sub = identifier_value(ctx)
        if d == "coding":
            env = ctx.choice(["staging", "canary"])
            line = {"commit": f"Deploying commit {val} (HEAD of main)", "uuid": f"Rollout id: {val}",
                    "build": f"Artifact produced by {val}", "jira": f"Change ticket {val} linked to this rollout",
                    "pr": f"Includes changes from {val}", "incident": f"Deploy annotated with {val}"}[sub]
            content = gen_deploy_log(ctx, p["service"], env, ctx.size_chars(300, 2500, "log"), inject=[line])
            tc = ToolCall("deploy", {"service": p["service"], "env": env}, content)
            follow = f"The rollout went through; keep the {label} from that log in case we need to roll back."
        elif d == "data":
            if ctx.chance(0.5):
                col = {"exp": "experiment_id", "job": "job_id", "dash": "dashboard_id", "seg": "segment_id", "uuid": "dataset_version"}[sub]
                regen = lambda: identifier_value(ctx, sub)[0]
                sql, content = gen_sql_table(ctx, ctx.size_chars(200, 1500, "table"), inject_row={col: val, "conversion_rate": "0.2841"},
                                             style="psql", extra_cols={col: lambda c: regen()})
                tc = ToolCall("sql_query", {"sql": sql}, content)
                follow = f"The row with the outlier conversion is the {label} we were looking for."
            else:
                inject = {"id": val, "name": f"{label} of interest", "status": "active", "owner": ctx.person(), "created_at": ctx.ts()}
                url = f"https://api.{p['corp']}-ads.com/v3/{ctx.choice(['campaigns', 'experiments', 'segments'])}?limit=200"
                body = json.loads(gen_api_json(ctx, ctx.size_chars(300, 2500, "json")))
                body["data"].insert(ctx.rng.randint(0, len(body["data"])), inject)
                content = json.dumps(body, indent=ctx.choice([None, 2]))
                tc = ToolCall("http_get", {"url": url}, content)
                follow = f"Found it in the API listing; that's the {label} we care about."
        else:
            if sub in ("order", "rma", "invoice", "refund"):
                oid = val if sub == "order" else ctx.uniq(lambda: f"ORD-{ctx.digits(5)}")
                extra = {} if sub == "order" else {{"rma": "rma_number", "invoice": "invoice_number", "refund": "refund_id"}[sub]: val}
                content = gen_order_json(ctx, ctx.size_chars(300, 2500, "json"), oid, extra=extra)
                tc = ToolCall("lookup_order", {"order_id": oid} if sub != "order" else {"email": f"{ctx.choice(FIRST).lower()}@example.com"}, content)
                follow = f"That's the record. The {label} in there is what we'll reference with the customer."
            else:
                inject = {"customer_id": val if sub == "customer" else ctx.uniq(lambda: "CUS-" + ctx.alnum(6, True)),
                          "name": ctx.person(), "city": ctx.choice(CITIES), "lifetime_value": "1412.77", "open_tickets": 1,
                          "recent_tickets": [{"ticket": val if sub == "ticket" else ctx.uniq(lambda: "TCK-" + ctx.digits(6)),
                                              "subject": "Parcel marked delivered but not received", "status": "open", "updated": ctx.ts()}],
                          "match": "exact email"}
                q = f"email:{ctx.choice(FIRST).lower()}.{ctx.choice(LAST).lower()}@example.com"
                content = gen_crm_json(ctx, ctx.size_chars(400, 3000, "json"), q, inject=inject)
                tc = ToolCall("crm_search", {"query": q}, content)
                follow = f"There's exactly one exact-email match in those results; that {label} is our customer."
        return tc, [val], f"{tc.name} result contains the {label} {val}", follow
    if kind == "path":
        val = None if d == "data" else path_value(ctx)
        if d == "coding":
            if ctx.chance(0.5):
                pat = ctx.ident(2)
                content = gen_grep(ctx, pat, ctx.size_chars(200, 2000, "code"),
                                   inject=[f"{val}:{ctx.rng.randint(10, 800)}:    def {pat}(self, {ctx.choice(NOUNS)}):  # the real implementation"])
                tc = ToolCall("grep", {"pattern": pat, "path": "."}, content)
                follow = "Only one of those matches is the actual definition; the rest are call sites."
            else:
                env = ctx.choice(["staging", "canary"])
                content = gen_deploy_log(ctx, p["service"], env, ctx.size_chars(300, 2500, "log"), inject=[f"Uploaded build artifact to {val}"])
                tc = ToolCall("deploy", {"service": p["service"], "env": env}, content)
                follow = "Deploy is done; the artifact location is in the log if we need to roll back."
        elif d == "data":
            if ctx.chance(0.5):
                val = path_value(ctx, "object")
                body = {"status": "complete", "export_id": f"exp_{ctx.alnum(12)}", "rows": ctx.rng.randint(10 ** 4, 10 ** 7),
                        "download_url": val, "expires_at": ctx.ts(), "columns": ctx.rng.sample(list(COLS), 6),
                        "preview": [{c: COLS[c](ctx) for c in ctx.rng.sample(list(COLS), 5)} for _ in range(ctx.rng.randint(5, 30))]}
                tc = ToolCall("http_get", {"url": f"https://api.{p['corp']}-warehouse.io/v1/exports/latest"}, json.dumps(body, indent=2))
                follow = "The export finished; the download location in that response is the one to hand over."
            else:
                val = path_value(ctx, "image")
                series = [{"x": ctx.date(), "y": round(ctx.rng.uniform(0, 100), 2), "series": ctx.choice(["web", "ios", "android"])}
                          for _ in range(ctx.rng.randint(10, 80))]
                body = {"status": "ok", "file": val, "spec": {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
                                                              "mark": "line", "data": {"values": series},
                                                              "encoding": {"x": {"field": "x", "type": "temporal"},
                                                                           "y": {"field": "y", "type": "quantitative"},
                                                                           "color": {"field": "series"}}}}
                tc = ToolCall("plot", {"kind": "line", "title": f"{ctx.choice(NOUNS)} over time"}, json.dumps(body))
                follow = "Chart rendered; it's saved where the tool said."
        else:
            if ctx.chance(0.5):
                q = f"{ctx.choice(['return', 'warranty', 'lost parcel', 'refund'])} policy {ctx.choice(NOUNS)}"
                inject = {"title": "Official policy: what to do in this case", "url": val,
                          "snippet": "This is the current policy page maintained by our own support team. " + words_sentence(ctx, 12),
                          "published": ctx.date()}
                content = gen_search_results(ctx, ctx.size_chars(400, 3000, "json"), q, inject=inject)
                tc = ToolCall("web_search", {"query": q}, content)
                follow = "The first-party result in that list is the authoritative one; the others are forums."
            else:
                oid = ctx.uniq(lambda: f"ORD-{ctx.digits(5)}")
                content = gen_order_json(ctx, ctx.size_chars(300, 2500, "json"), oid, extra={"return_label_url": val})
                tc = ToolCall("lookup_order", {"order_id": oid}, content)
                follow = "The return label has already been generated for this one; the link is in the order record."
        return tc, [val], f"{tc.name} result contains {val}", follow
    raise ValueError(kind)


# --------------------------------------------------------------------------
# Filler tool calls per domain
# --------------------------------------------------------------------------

def filler_tool(ctx: Ctx) -> ToolCall:
    d = ctx.domain
    p = ctx.project
    r = ctx.rng.random()
    if d == "coding":
        if r < 0.30:
            f = ctx.choice(p["files"])
            return ToolCall("read_file", {"path": f}, gen_python_file(ctx, ctx.size_chars(300, 4000, "code"), ctx.chance(0.5)))
        if r < 0.50:
            target = ctx.choice(p["tests"] + ["tests/"])
            content, failed = gen_pytest(ctx, ctx.size_chars(300, 4000, "log"))
            return ToolCall("run_tests", {"target": target}, content, failed)
        if r < 0.70:
            pat = ctx.choice([ctx.ident(2), ctx.camel(2), ctx.choice(NOUNS) + "_"])
            return ToolCall("grep", {"pattern": pat, "path": "src/"}, gen_grep(ctx, pat, ctx.size_chars(200, 2500, "code")))
        if r < 0.85:
            f = ctx.choice(p["files"])
            return ToolCall("edit_file", {"path": f, "old": ctx.choice(py_statement(ctx, "")), "new": ctx.choice(py_statement(ctx, ""))},
                            gen_diff(ctx, f))
        env = ctx.choice(["staging", "canary", "dev"])
        fail = None
        if ctx.chance(0.25):
            fail = gen_traceback(ctx, f"{ctx.choice(['TimeoutError', 'ConnectionResetError', 'RuntimeError'])}: {words_sentence(ctx, 6)}")
        return ToolCall("deploy", {"service": p["service"], "env": env},
                        gen_deploy_log(ctx, p["service"], env, ctx.size_chars(300, 3000, "log"), fail_lines=fail), bool(fail))
    if d == "data":
        if r < 0.55:
            sql, content = gen_sql_table(ctx, ctx.size_chars(300, 4000, "table"))
            return ToolCall("sql_query", {"sql": sql}, content)
        if r < 0.80:
            url = f"https://api.{p['corp']}-ads.com/v3/{ctx.choice(['campaigns', 'adsets', 'insights'])}?since={ctx.date()}"
            return ToolCall("http_get", {"url": url}, gen_api_json(ctx, ctx.size_chars(300, 3500, "json")))
        series = [{"x": ctx.date(), "y": round(ctx.rng.uniform(0, 1000), 2), "series": ctx.choice(["web", "ios", "android", "desktop"])}
                  for _ in range(ctx.rng.randint(10, 90))]
        body = {"status": "ok", "file": f"/tmp/plots/{ctx.ident(2)}.png",
                "spec": {"mark": ctx.choice(["line", "bar", "point"]), "data": {"values": series},
                         "encoding": {"x": {"field": "x", "type": "temporal"}, "y": {"field": "y", "type": "quantitative"}}}}
        return ToolCall("plot", {"kind": body["spec"]["mark"], "title": f"{ctx.choice(NOUNS)} by {ctx.choice(['day', 'week', 'device'])}"},
                        json.dumps(body))
    if r < 0.35:
        oid = ctx.uniq(lambda: f"ORD-{ctx.digits(5)}")
        return ToolCall("lookup_order", {"order_id": oid}, gen_order_json(ctx, ctx.size_chars(300, 2500, "json"), oid))
    if r < 0.60:
        q = ctx.choice([f"name:{ctx.person()}", f"email:*{ctx.choice(LAST).lower()}*", f"city:{ctx.choice(CITIES)} open_tickets>0"])
        return ToolCall("crm_search", {"query": q}, gen_crm_json(ctx, ctx.size_chars(400, 4000, "json"), q))
    if r < 0.85:
        q = f"{ctx.choice(['carrier delay', 'customs hold', 'chargeback', 'warranty', 'return label'])} {ctx.choice(CITIES)} {ctx.choice(NOUNS)}"
        return ToolCall("web_search", {"query": q}, gen_search_results(ctx, ctx.size_chars(400, 3000, "json"), q))
    to = f"{ctx.choice(FIRST).lower()}.{ctx.choice(LAST).lower()}@example.com"
    body = "\n\n".join(words_sentence(ctx, ctx.rng.randint(10, 25)) for _ in range(ctx.rng.randint(3, 8)))
    body += f"\n\nBest regards,\n{ctx.person()}\n{p['corp'].title()} Customer Care\n\n> On {ctx.date()}, {to} wrote:\n> " + \
        "\n> ".join(words_sentence(ctx, 14) for _ in range(ctx.rng.randint(2, 6)))
    content = json.dumps({"status": "queued", "message_id": f"<{ctx.alnum(16)}@mail.{p['corp']}.com>", "to": to,
                          "headers": {"X-Queue": ctx.choice(["support", "billing"]), "X-Priority": "3"}, "rendered_body": body}, indent=2)
    return ToolCall("send_email", {"to": to, "subject": f"Re: your {ctx.choice(NOUNS)}", "body": body[:200]}, content)


SYSTEM_PROMPTS = {
    "coding": "You are DevPilot, an autonomous coding agent working in the {pkg} repository. You can read and edit files, "
              "grep, run tests and deploy. Think step by step, call tools when you need information, and keep the user informed.",
    "data": "You are an analytics assistant for {corp}. You can run SQL against the warehouse (read-only), call HTTP APIs and "
            "render plots. Explain your reasoning and show the numbers that support your conclusions.",
    "support": "You are a customer-support agent for {corp}'s online store. You can look up orders, search the CRM and the web, "
               "and send emails to customers. Be accurate, polite and concise.",
}

TOOL_SCHEMAS = {
    "coding": ["read_file", "run_tests", "grep", "edit_file", "deploy"],
    "data": ["sql_query", "plot", "http_get"],
    "support": ["lookup_order", "crm_search", "web_search", "send_email"],
}


# --------------------------------------------------------------------------
# Thread assembly
# --------------------------------------------------------------------------

CARRIERS = {
    "constraint": [("user", 1.0)],
    "preference": [("user", 1.0)],
    "identifier": [("user", 0.3), ("assistant", 0.3), ("tool", 0.4)],
    "path": [("user", 0.25), ("assistant", 0.3), ("tool", 0.45)],
    "error": [("tool", 0.75), ("user", 0.25)],
    "decision": [("assistant", 0.55), ("user", 0.45)],
}
KIND_WEIGHTS = {"constraint": 0.2, "preference": 0.15, "identifier": 0.2, "path": 0.15, "error": 0.15, "decision": 0.15}


def plan_facts(ctx: Ctx, n_messages: int, density: float) -> list[FactSpec]:
    rng = ctx.rng
    n = max(6, round(n_messages * density * rng.uniform(0.85, 1.15)))
    counts = {k: max(1, int(n * w)) for k, w in KIND_WEIGHTS.items()}  # proportional, at least one each
    while sum(counts.values()) < n:
        k = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
        counts[k] += 1
    kinds = [k for k, c in counts.items() for _ in range(c)]
    rng.shuffle(kinds)
    lo, hi = 2, min(int(n_messages * 0.95), n_messages - 30)
    span = (hi - lo) / n
    specs = []
    for i, k in enumerate(kinds):
        target = int(lo + span * i + rng.uniform(0, span))
        carrier = rng.choices([c for c, _ in CARRIERS[k]], weights=[w for _, w in CARRIERS[k]])[0]
        specs.append(FactSpec(k, carrier, target))
    return specs


def user_fact(ctx: Ctx, spec: FactSpec):
    k = spec.kind
    if k == "constraint":
        sents, checks, sub = constraint_value(ctx)
        s = ctx.choice(sents)
        return embed_user(ctx, s), checks, s, sub
    if k == "preference":
        sents, checks, sub = preference_value(ctx)
        s = ctx.choice(sents)
        return embed_user(ctx, s), checks, s, sub
    if k == "identifier":
        val, label, sub = identifier_value(ctx)
        s = ctx.choice(identifier_user_sentences(val, label))
        return embed_user(ctx, s), [val], s, sub
    if k == "path":
        val = path_value(ctx)
        s = ctx.choice(path_user_sentences(val))
        return embed_user(ctx, s), [val], s, None
    if k == "error":
        code, exc, msg = error_value(ctx)
        err = f"{exc}: {code} {msg}" if exc else f"{code}: {msg}"
        action = {"coding": ["run the migration locally", "start the worker", "hit the staging endpoint"],
                  "data": ["refresh the dashboard", "run the scheduled export", "open the saved query"],
                  "support": ["process the refund in the admin panel", "open the customer's account", "print the label"]}[ctx.domain]
        s = ctx.choice([f"When I try to {ctx.choice(action)} I get '{err}'.",
                        f"Seeing this on my side: {err}",
                        f"The error they're getting is {err}, if that helps.",
                        f"Pasting what I see:\n```\n{err}\n```"])
        return embed_user(ctx, s), [code] + ([exc] if exc else []), s, None
    if k == "decision":
        x, y, chk = decision_value(ctx)
        s = ctx.choice(decision_sentences(x, y, "user"))
        return embed_user(ctx, s), [chk], s, None
    raise ValueError(k)


def assistant_fact(ctx: Ctx, spec: FactSpec):
    k = spec.kind
    if k == "identifier":
        val, label, sub = identifier_value(ctx)
        s = ctx.choice(identifier_assistant_sentences(val, label))
        return embed_assistant(ctx, s), [val], s, sub
    if k == "path":
        val = path_value(ctx)
        s = ctx.choice(path_assistant_sentences(val))
        return embed_assistant(ctx, s), [val], s, None
    if k == "decision":
        x, y, chk = decision_value(ctx)
        s = ctx.choice(decision_sentences(x, y, "assistant"))
        return embed_assistant(ctx, s), [chk], s, None
    raise ValueError(k)


class Builder:
    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.msgs: list[dict] = []
        self.facts: list[dict] = []

    def add(self, m: dict) -> int:
        self.msgs.append(m)
        return len(self.msgs) - 1

    def record(self, spec: FactSpec, idx: int, checks, text, sub=None):
        self.facts.append({"id": f"f{len(self.facts) + 1:03d}", "kind": spec.kind, "position": idx,
                           "role": self.msgs[idx]["role"], "check": checks, "text": text,
                           "subtype": sub, "target": spec.target})

    def tool_round(self, calls: list[ToolCall], pre_text: str | None):
        tcs = []
        ids = []
        for c in calls:
            cid = self.ctx.call_id()
            ids.append(cid)
            tcs.append({"id": cid, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}})
        self.add({"role": "assistant", "content": pre_text or None, "tool_calls": tcs})
        idxs = []
        for c, cid in zip(calls, ids):
            idxs.append(self.add({"role": "tool", "tool_call_id": cid, "content": c.content}))
        return idxs

    def turn(self, due: list[FactSpec], max_msgs: int) -> list[FactSpec]:
        """Builds one user turn; returns the specs it planted."""
        ctx = self.ctx
        planted = []
        user_specs = [s for s in due if s.carrier == "user"][:2]
        tool_specs = [s for s in due if s.carrier == "tool"][:1]
        asst_specs = [s for s in due if s.carrier == "assistant"][:1]

        # user message
        if user_specs:
            texts = []
            recs = []
            for s in user_specs:
                t, checks, sent, sub = user_fact(ctx, s)
                texts.append(t)
                recs.append((s, checks, sent, sub))
            uidx = self.add({"role": "user", "content": "\n\n".join(texts)})
            for s, checks, sent, sub in recs:
                self.record(s, uidx, checks, sent, sub)
                planted.append(s)
        else:
            self.add({"role": "user", "content": user_prose(ctx)})

        budget = max_msgs - 2  # user + final assistant
        if ctx.chance(0.12) and not tool_specs:
            rounds = 0
        else:
            rounds = ctx.rng.choices([1, 2, 3, 4, 5], weights=[3, 4, 3, 2, 1])[0]
        fact_round = ctx.rng.randint(0, max(0, rounds - 1)) if tool_specs else -1
        follow = None
        last_ref = None
        for r in range(rounds):
            ncalls = ctx.rng.choices([1, 2, 3], weights=[6, 3, 1])[0]
            if 1 + ncalls > budget:
                ncalls = budget - 1
            if ncalls < 1:
                break
            calls = [filler_tool(ctx) for _ in range(ncalls)]
            fact_info = None
            if r == fact_round and tool_specs:
                tc, checks, text, follow = render_tool_fact(ctx, tool_specs[0].kind)
                slot = ctx.rng.randint(0, ncalls - 1)
                calls[slot] = tc
                fact_info = (slot, checks, text, follow)
            pre = fill(ctx, ctx.choice(ASSISTANT_PRE)) if ctx.chance(0.6) else None
            idxs = self.tool_round(calls, pre)
            vals = [v for v in calls[0].args.values() if isinstance(v, str) and 3 < len(v) < 90]
            if vals and not (fact_info and fact_info[0] == 0):
                last_ref = vals[0]
            budget -= 1 + ncalls
            if fact_info:
                slot, checks, text, follow = fact_info
                self.record(tool_specs[0], idxs[slot], checks, text)
                planted.append(tool_specs[0])
        # final assistant message
        if asst_specs:
            text, checks, sent, sub = assistant_fact(ctx, asst_specs[0])
            if follow:
                text = follow + " " + text
            aidx = self.add({"role": "assistant", "content": text})
            self.record(asst_specs[0], aidx, checks, sent, sub)
            planted.append(asst_specs[0])
        else:
            text = fill(ctx, ctx.choice(ASSISTANT_FINAL))
            if last_ref and ctx.chance(0.5):
                text = ctx.choice(["I checked {r}. ", "Looked at {r}. ", "Results for {r} are above. ",
                                   "Went through {r}. "]).format(r=f"`{last_ref}`") + text
            if follow:
                text = follow + " " + text
            self.add({"role": "assistant", "content": text})
        return planted


def _build(seed_str: str, domain: str, n_messages: int, density: float):
    rng = random.Random(seed_str)
    ctx = Ctx(rng, domain)
    b = Builder(ctx)
    b.add({"role": "system", "content": SYSTEM_PROMPTS[domain].format(pkg=ctx.project["pkg"], corp=ctx.project["corp"])})
    specs = plan_facts(ctx, n_messages, density)
    pending = sorted(specs, key=lambda s: s.target)
    while True:
        remaining = n_messages - len(b.msgs)
        if remaining < 14:
            break
        due = [s for s in pending if s.target <= len(b.msgs) + 1]
        planted = b.turn(due, min(remaining - 12, 40))
        for s in planted:
            pending.remove(s)
    # fill to exactly n_messages, ending with a user message
    r = n_messages - len(b.msgs) - 1
    if r % 2 == 1:
        calls = [filler_tool(ctx), filler_tool(ctx)]
        b.add({"role": "user", "content": user_prose(ctx)})
        b.tool_round(calls, None)
        b.add({"role": "assistant", "content": fill(ctx, ctx.choice(ASSISTANT_FINAL))})
        r -= 5
    while r > 0:
        b.add({"role": "user", "content": ctx.choice(USER_FOLLOWUPS) + " " + ctx.choice(DISTRACTORS[domain])})
        b.add({"role": "assistant", "content": fill(ctx, ctx.choice(ASSISTANT_FINAL))})
        r -= 2
    b.add({"role": "user", "content": user_prose(ctx)})
    assert len(b.msgs) == n_messages, (len(b.msgs), n_messages)
    return b, pending


def message_text(m: dict) -> str:
    """Every text an LLM sees in a message: content (string or text parts) and tool-call names/arguments."""
    parts = []
    c = m.get("content")
    if isinstance(c, str):
        parts.append(c)
    elif isinstance(c, list):
        for p in c:
            if isinstance(p, dict):
                for key in ("text", "content", "input_text", "output_text"):
                    if isinstance(p.get(key), str):
                        parts.append(p[key])
            elif isinstance(p, str):
                parts.append(p)
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or tc  # OpenAI {"function": {...}} or neutral {name, arguments}
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args)
        parts.append(args)
    tr = m.get("tool_result")  # compactd's neutral envelope, should a neutral array ever be measured
    if isinstance(tr, dict) and tr.get("content") is not None:
        c = tr["content"]
        parts.append(c if isinstance(c, str) else json.dumps(c))
    return "\n".join(parts)


def verify(messages: list[dict], facts: list[dict]) -> list[str]:
    """Each check string must occur only in its fact's message."""
    texts = [message_text(m) for m in messages]
    sep = "\x00"
    big = sep.join(texts)
    starts = []
    off = 0
    for t in texts:
        starts.append(off)
        off += len(t) + 1
    problems = []
    for f in facts:
        for c in f["check"]:
            if len(c) < 4:
                problems.append(f"{f['id']}: check {c!r} too short")
            where = set()
            i = big.find(c)
            while i != -1:
                where.add(bisect.bisect_right(starts, i) - 1)
                i = big.find(c, i + 1)
            if where != {f["position"]}:
                problems.append(f"{f['id']} ({f['kind']}): check {c!r} found in messages {sorted(where)[:5]}, expected [{f['position']}]")
    return problems


def generate(seed: int, domain: str, n_messages: int, density: float = 25 / 500, max_attempts: int = 60) -> dict:
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}")
    if n_messages < 60:
        raise ValueError("--messages must be at least 60")
    last = None
    for attempt in range(max_attempts):
        seed_str = f"compactd-eval:{GEN_VERSION}:{seed}:{domain}:{n_messages}:{attempt}"
        b, unplanted = _build(seed_str, domain, n_messages, density)
        problems = verify(b.msgs, b.facts)
        if not problems:
            break
        last = problems
    else:
        raise RuntimeError(f"could not generate a collision-free thread: {last[:5]}")
    roles = {}
    for m in b.msgs:
        roles[m["role"]] = roles.get(m["role"], 0) + 1
    kinds = {}
    buckets = {"early": 0, "middle": 0, "late": 0}
    for f in b.facts:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        rel = f["position"] / n_messages
        f["bucket"] = "early" if rel < 1 / 3 else ("middle" if rel < 2 / 3 else "late")
        buckets[f["bucket"]] += 1
    failed_tools = sum(1 for m in b.msgs if m["role"] == "tool" and ("error" in m["content"][:4000].lower()))
    meta = {"generator": "compactd eval/generate.py", "version": GEN_VERSION, "seed": seed, "domain": domain,
            "n_messages": len(b.msgs), "attempt": attempt, "roles": roles,
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in b.msgs),
            "chars": sum(len(message_text(m)) for m in b.msgs),
            "tool_chars": sum(len(m["content"]) for m in b.msgs if m["role"] == "tool"),
            "facts": len(b.facts), "facts_by_kind": kinds, "facts_by_bucket": buckets,
            "facts_unplanted": len(unplanted), "tools": TOOL_SCHEMAS[domain],
            "tool_messages_mentioning_error": failed_tools}
    return {"messages": b.msgs, "facts": b.facts, "meta": meta}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--domain", choices=DOMAINS, required=True)
    ap.add_argument("--messages", type=int, required=True, help="exact number of messages (>= 60; 100-5000 intended)")
    ap.add_argument("--density", type=float, default=25 / 500, help="planted facts per message (default 25 per 500)")
    ap.add_argument("--out", required=True, help="output JSON path ('-' for stdout)")
    ap.add_argument("--messages-only", action="store_true", help="write only the OpenAI messages array")
    a = ap.parse_args(argv)
    t = generate(a.seed, a.domain, a.messages, a.density)
    data = t["messages"] if a.messages_only else t
    s = json.dumps(data, ensure_ascii=False)
    if a.out == "-":
        sys.stdout.write(s + "\n")
    else:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(s)
        m = t["meta"]
        print(f"wrote {a.out}: {m['n_messages']} messages, {m['facts']} facts {m['facts_by_kind']}, "
              f"{m['chars']:,} chars, attempt {m['attempt']}", file=sys.stderr)


if __name__ == "__main__":
    main()
