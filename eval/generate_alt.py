#!/usr/bin/env python3
"""Held-out thread generator for the fact-retention evaluation (Python stdlib only).

This is a second, independently written generator.  It was written without looking at
eval/generate.py, so its domains, tools, output formats and the wording of planted facts
are its own; results on it are not tuned to the main generator's phrasing.

Domains (each with its own tools and output formats):
  oncall  infrastructure incident response: kubectl tables, logfmt / JSON / nginx / log4j
          log lines, Prometheus JSON, incident API JSON, shell sessions, terraform plans,
          markdown runbooks
  mlops   ML experiment tracking: CSV run exports, run JSON, Hydra-style YAML, training
          logs, bucket listings, nvidia-smi tables, job-submission JSON
  legal   contract review: DMS search JSON, HTML clause text, unified diffs, markdown
          issue lists, quoted e-mail threads, case-law result lists
  shop    e-commerce operations: admin-API JSON with terse keys, inventory CSV, rate
          tables, storefront HTML, payment log lines, psql result tables

Planted facts, six kinds: constraint, preference, identifier, path, error, decision.
Every check string of a fact occurs in exactly one message (the fact's own) under a
superset of the text eval/run.py scores (content, tool-call names and arguments, decoded
JSON).  A collision re-rolls that fact's value deterministically (new attempt number,
same everything else), so threads are a pure function of (seed, domain, n_messages).

API, same shape as the main generator:
  generate(seed, domain, n_messages) -> {"messages": [...], "facts": [...], "meta": {...}}
  KINDS, DOMAINS, GEN_VERSION, message_text(m)

CLI:
  python3 eval/generate_alt.py --seed 3 --domain legal --messages 600 --out /tmp/t.json
  (also writes /tmp/t.messages.json, the bare OpenAI messages array compactd reads)
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import re
import string
import sys
from datetime import datetime, timedelta, timezone

GEN_VERSION = "alt-1.0"
KINDS = ("constraint", "preference", "identifier", "path", "error", "decision")
DOMAINS = ("oncall", "mlops", "legal", "shop")
BUCKETS = ("early", "middle", "late")
FACTS_PER_MESSAGE = 1 / 20          # ~25 facts per 500 messages
UTC = timezone.utc

LOW = string.ascii_lowercase
DIG = string.digits
B36 = DIG + LOW
UPN = string.ascii_uppercase + DIG
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
CONS = "bcdfghjklmnpqrstvwxz2456789"          # k8s-style pod hash alphabet


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------

def hx(r, n):
    return format(r.getrandbits(4 * n), "0%dx" % n)


def rs(r, alphabet, n):
    return "".join(r.choices(alphabet, k=n))


def pick(r, seq):
    return seq[r.randrange(len(seq))]


def chance(r, p):
    return r.random() < p


def wpick(r, pairs):
    """pairs: [(weight, value), ...]"""
    tot = sum(w for w, _ in pairs)
    x = r.random() * tot
    for w, v in pairs:
        x -= w
        if x < 0:
            return v
    return pairs[-1][1]


def uuid4(r, upper=False):
    h = hx(r, 32)
    s = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{pick(r, '89ab')}{h[17:20]}-{h[20:]}"
    return s.upper() if upper else s


def iso(t, ms=True, z=True):
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if ms:
        s += ".%03d" % (t.microsecond // 1000)
    return s + ("Z" if z else "+00:00")


def ordinal(n):
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def grouped(n, sep=","):
    return f"{n:,}".replace(",", sep)


_TOK = re.compile(r" ?[A-Za-z]{1,9}| ?\d{1,3}| ?[^\sA-Za-z\d]{1,2}|\n+| +")


def est_tokens(s):
    """Cheap o200k-ish token estimate (stdlib only); calibrated to within ~15%."""
    return len(_TOK.findall(s))


def fill_rows(r, target, make_row, cap=100000):
    """Call make_row() until the estimated tokens reach target."""
    rows, tok = [], 0
    while tok < target and len(rows) < cap:
        row = make_row()
        rows.append(row)
        tok += est_tokens(row) + 1
    return rows


def insert_mid(r, rows, item, lo=0.25, hi=0.8):
    i = int(len(rows) * (lo + (hi - lo) * r.random())) if rows else 0
    rows.insert(i, item)
    return i


def table(headers, rows, sep="  ", align=None):
    """Fixed-width text table (kubectl / nvidia-smi style)."""
    cols = list(zip(*([headers] + rows))) if rows else [[h] for h in headers]
    widths = [max(len(str(c)) for c in col) for col in cols]
    out = []
    for row in [headers] + rows:
        cells = [str(c).ljust(w) for c, w in zip(row, widths)]
        out.append(sep.join(cells).rstrip())
    return "\n".join(out)


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def jdump(obj, r=None, compact=None):
    if compact is None:
        compact = r is not None and chance(r, 0.5)
    if compact:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(obj, ensure_ascii=False, indent=2)


# --------------------------------------------------------------------------
# vocabulary
# --------------------------------------------------------------------------

FIRST = ["Amara", "Bilal", "Chiara", "Dmitri", "Efua", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Kavya",
         "Lars", "Mei", "Nnamdi", "Oksana", "Pablo", "Qadir", "Rosa", "Sven", "Tamsin", "Uchenna", "Vera",
         "Wendell", "Ximena", "Yusuf", "Zofia", "Aoife", "Bruno", "Chidi", "Dagny", "Emeka", "Fen", "Gael",
         "Hana", "Idris", "Juno", "Kaito", "Leila", "Mateus", "Noor", "Otto", "Priya", "Rhys", "Saoirse",
         "Tomasz", "Umar", "Valentina", "Wiebke", "Yara", "Zeno", "Anouk", "Bogdan", "Cyrus", "Delphine"]
LAST = ["Okafor", "Lindqvist", "Haddad", "Moreau", "Tanaka", "Kowalczyk", "Adeyemi", "Fischer", "Rossi",
        "Nakamura", "Oyelaran", "Brennan", "Castellanos", "Dubois", "Eriksen", "Fonseca", "Gallagher", "Horvath",
        "Iqbal", "Jovanovic", "Kruger", "Laine", "Mbeki", "Novak", "Petrov", "Quintero", "Rahman", "Sato",
        "Trinh", "Ueda", "Varga", "Whitfield", "Yilmaz", "Zielinski", "Abernethy", "Bakshi", "Cardoso", "Dimitriou"]

# option code names (decisions only; never used in filler)
CODENAMES = ["Kestrel", "Tamarack", "Basalt", "Marten", "Juniper", "Osprey", "Larch", "Feldspar", "Heron",
             "Sorrel", "Quillwort", "Bittern", "Obsidian", "Alder", "Wren", "Cobalt", "Garnet", "Lynx", "Mistral",
             "Nettle", "Plover", "Rowan", "Sable", "Umber", "Vetch", "Whinchat", "Yarrow", "Zircon", "Avocet",
             "Bramble", "Cormorant", "Dunlin", "Egret", "Fescue", "Gannet", "Hawthorn", "Ibis", "Jasper",
             "Kittiwake", "Linnet", "Nightjar", "Ortolan", "Petrel", "Redstart", "Shrike", "Vireo", "Warbler",
             "Yellowhammer", "Zephyr", "Aspen", "Bluethroat", "Chiffchaff", "Dotterel", "Eider", "Firecrest",
             "Goldcrest", "Hobby", "Knot", "Lapwing", "Mallard", "Nuthatch", "Oriole", "Pipit", "Quail",
             "Ruff", "Siskin", "Twite", "Wigeon", "Brambling", "Crossbill", "Dipper", "Fieldfare", "Garganey"]

OFFICE_DISTRACTORS = [
    "there's no limit to how much coffee I'm drinking this week",
    "the ceiling in the office is leaking again so I'm in the kitchen",
    "I have a hard limit of two standups before noon, any more and I stop being a person",
    "we can't go past the bakery on the way in without stopping, it's becoming a problem",
    "absolutely not doing karaoke at the offsite, whatever Sam says",
    "the budget review meeting ran an hour over, which is why I'm late on this",
    "cap? I left my cap on the tram again",
    "never eating at that ramen place again",
    "the deadline for the team photo form was apparently yesterday",
    "I must have restarted my laptop four times today",
    "spending on office snacks is out of control, someone expensed 40 kombuchas",
    "it's a no-go on the parking garage today, full by 8",
    "important: the kitchen fridge gets cleared out on Friday",
    "we always say we'll write docs and we never do",
    "my kid's school has a strict no-phones rule and honestly, respect",
    "the max I can do is pretend to enjoy the all-hands",
    "keep me out of the fantasy league chat lol",
    "no rush on the lunch order, whoever's doing it",
    "the spend on the team dinner was fine, nobody panic",
    "forbidden knowledge: the good meeting room is free on Thursdays",
    "hard no on the 7am gym class, not happening",
    "the wifi has a ceiling of about 3 Mbps on this floor",
    "there is zero budget left in my brain for meetings today",
    "I swear the printer has a quota of one jam per day",
]

OPENERS = ["", "", "", "hey", "hi!", "morning", "ok so", "quick one:", "Hi —", "yo", "right,", "ok",
           "sorry for the wall of text incoming", "back from lunch.", "follow-up:", "hmm."]

ACKS = ["thanks", "thx", "ty", "cheers", "great, thanks", "ok cool", "nice", "perfect", "appreciated", "👍"]


# --------------------------------------------------------------------------
# the per-thread world (seeded; filler entities only, never fact values)
# --------------------------------------------------------------------------

ONCALL_SERVICES = ["payments-api", "ledger-writer", "checkout-web", "auth-gateway", "search-indexer",
                   "notif-fanout", "fx-rates", "risk-scorer", "edge-proxy", "cart-svc", "session-store",
                   "invoice-render", "geo-lookup", "webhook-relay", "quota-keeper", "report-builder",
                   "media-resizer", "audit-trail"]
FILLER_REGIONS = ["us-east-1", "eu-west-1", "us-west-2", "eu-central-1"]
FACT_REGIONS = ["ap-southeast-3", "me-central-1", "sa-east-1", "af-south-1", "eu-south-2", "ca-west-1",
                "ap-northeast-3", "il-central-1", "mx-central-1", "eu-north-1", "ap-south-2", "us-gov-west-1",
                "europe-west10", "me-west1", "asia-south2", "australia-southeast2", "africa-south1",
                "northamerica-south1", "ap-east-1", "eu-west-3"]
ML_MODELS = ["tern-1.3b", "gull-7b", "reranker-xs", "asr-conformer-m", "fraud-gbdt", "vit-b16-ft", "embed-384",
             "ctr-dcn-v2", "summarizer-t5l", "ocr-trocr-base"]
ML_DATASETS = ["webtext-dedup", "support-tickets-2025", "invoices-ocr", "clicklogs-q3", "speech-multiling",
               "product-pairs", "code-review-comments", "receipts-synth", "faq-pairs-v2"]
LEGAL_PARTIES = ["Northwind Holdings", "Castellan Biotech", "Orrery Systems", "Pemberton & Vale",
                 "Halcyon Freight", "Mirelle Cosmetics", "Tidewater Energy", "Quarry Labs", "Solent Analytics",
                 "Brightmoor Estates", "Verdant Agritech", "Kilnworth Ceramics"]
SHOP_PRODUCTS = ["Merino Crew Sock", "Linen Apron", "Enamel Mug 350ml", "Walnut Desk Tray", "Canvas Tote",
                 "Cold Brew Kit", "Beeswax Wraps (3pk)", "Stoneware Bowl", "Wool Throw", "Copper Kettle",
                 "Cork Yoga Block", "Bamboo Cutlery Set", "Travel Journal A5", "Ceramic Planter S",
                 "Oak Chopping Board", "Recycled Rain Jacket", "Glass Carafe 1L", "Leather Key Fob"]
FILLER_CARRIERS = ["DHL Express", "UPS Standard", "DPD Classic", "GLS", "PostNL", "Royal Mail Tracked 48",
                   "Evri", "Colissimo", "FedEx Economy", "Hermes"]


class World:
    def __init__(self, seed, domain, n):
        r = random.Random(f"alt-world|{seed}|{domain}|{n}")
        self.domain = domain
        self.t0 = datetime(2026, 1, 5, 7, 30, tzinfo=UTC) + timedelta(days=r.randrange(0, 260),
                                                                       minutes=r.randrange(0, 600))
        self.span_s = max(6, n / 60) * 3600 * r.uniform(0.8, 1.6)      # thread covers hours to days
        self.people = [f"{pick(r, FIRST)} {pick(r, LAST)}" for _ in range(14)]
        self.user_name = self.people[0]
        if domain == "oncall":
            self.org = pick(r, ["fernhill", "ostrapay", "bluecoat", "lumenledger", "trellis"])
            self.services = r.sample(ONCALL_SERVICES, 10)
            nss = ["payments", "core", "edge", "growth", "platform"]
            self.ns = {s: pick(r, nss) for s in self.services}
            self.namespaces = sorted(set(self.ns.values()))
            self.regions = r.sample(FILLER_REGIONS, 2)
            self.kctx = f"prod-{self.regions[0]}"
            self.nodes = [f"ip-10-{r.randrange(16, 64)}-{r.randrange(0, 255)}-{r.randrange(2, 254)}."
                          f"{pick(r, self.regions)}.compute.internal" for _ in range(12)]
            self.topics = [f"{s.split('-')[0]}.{pick(r, ['events', 'commands', 'cdc', 'dlq'])}.v{r.randrange(1, 4)}"
                           for s in self.services[:5]]
            self.hosts = [f"{s}.{self.org}.internal" for s in self.services]
        elif domain == "mlops":
            self.org = pick(r, ["aurora-ml", "kelp-ai", "northstar-research", "quanta-lab"])
            self.models = r.sample(ML_MODELS, 5)
            self.datasets = r.sample(ML_DATASETS, 5)
            self.experiments = [f"{m.split('-')[0]}-{pick(r, ['ablation', 'sweep', 'ft', 'pretrain', 'distill'])}"
                                f"-{r.randrange(10, 99)}" for m in self.models]
            self.bucket = f"gs://{self.org}-ml-scratch"
            self.clusters = r.sample(["a100-pool-b", "h100-ew4", "l4-spot", "tpu-v5e-16", "a10g-batch"], 3)
            self.hosts = [f"gpu-{pick(r, ['a', 'h', 'l'])}{r.randrange(100, 999)}" for _ in range(8)]
            self.project = pick(r, ["core-lm", "ranking", "speech", "vision-docs", "risk-models"])
        elif domain == "legal":
            self.firm = pick(r, ["Ashdown Kerr LLP", "Morrow & Finch", "Helder Voss", "Quayle Barrington"])
            self.client = pick(r, LEGAL_PARTIES)
            self.parties = r.sample([p for p in LEGAL_PARTIES if p != self.client], 5)
            self.matters = [f"M-{r.randrange(2019, 2026)}-{r.randrange(100, 999)}" for _ in range(5)]
            self.tenant = pick(r, ["ashdownkerr", "morrowfinch", "heldervoss", "qbllp"])
            self.lawyers = self.people[1:7]
        else:
            self.store = pick(r, ["Hearth & Loom", "Fjordline Goods", "Pebble Supply Co", "Marrow Street"])
            self.slug = re.sub(r"[^a-z]+", "", self.store.lower())[:12]
            self.products = r.sample(SHOP_PRODUCTS, 12)
            self.warehouses = r.sample(["AMS-1", "LEJ-2", "MAD-1", "MAN-3", "WAW-1", "LYS-2"], 3)
            self.carriers = r.sample(FILLER_CARRIERS, 5)
            self.currency = pick(r, ["EUR", "GBP", "EUR", "USD"])
            self.campaigns = [pick(r, ["spring", "autumn", "solstice", "members", "outlet"]) + f"-{r.randrange(10, 99)}"
                              for _ in range(3)]

    def now(self, i, n):
        return self.t0 + timedelta(seconds=self.span_s * i / max(1, n))


def back(now, r, max_s):
    return now - timedelta(seconds=r.uniform(0, max_s))


def ts_seq(r, now, k, span_s):
    """k ascending timestamps ending near now."""
    out = sorted(now - timedelta(seconds=r.uniform(0, span_s)) for _ in range(k))
    return out


def email_of(name, host):
    first, last = name.split(" ", 1)
    return f"{first.lower()}.{re.sub('[^a-z]', '', last.lower())}@{host}"


# --------------------------------------------------------------------------
# oncall tools
# --------------------------------------------------------------------------

def pod_name(r, svc):
    return f"{svc}-{rs(r, CONS, 9 + r.randrange(2))}-{rs(r, CONS, 5)}"


def age(r):
    return pick(r, [f"{r.randrange(2, 59)}m", f"{r.randrange(1, 23)}h", f"{r.randrange(1, 40)}d",
                    f"{r.randrange(1, 9)}d{r.randrange(1, 23)}h", f"{r.randrange(2, 59)}s"])


def oc_kubectl(r, w, now, target, plant=None):
    sub = "pods" if plant == "identifier" else "describe" if plant == "path" else \
        wpick(r, [(5, "pods"), (3, "events"), (2, "describe"), (2, "top")])
    ns = pick(r, w.namespaces)
    svcs = [s for s in w.services if w.ns[s] == ns] or w.services
    planted = None
    pre = ""
    if chance(r, 0.25):
        pre = ("Warning: kubectl get componentstatus is deprecated in v1.19+; "
               "use kubectl get --raw='/readyz?verbose' instead\n") if chance(r, 0.3) else \
              "I0312 09:14:02.118311   48213 request.go:697] Waited for 1.04s due to client-side throttling, not priority and fairness\n"
    if sub == "pods":
        args = {"argv": ["get", "pods", "-n", ns, "-o", "wide"], "context": w.kctx}
        def row():
            svc = pick(r, svcs)
            st = wpick(r, [(20, "Running"), (2, "Pending"), (2, "Completed"), (1, "Terminating"), (1, "Init:0/1")])
            rst = "0" if chance(r, 0.7) else f"{r.randrange(1, 6)} ({r.randrange(2, 50)}h ago)"
            return [pod_name(r, svc), "2/2" if st == "Running" else "0/2", st, rst, age(r),
                    f"10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}", pick(r, w.nodes), "<none>", "<none>"]
        rows = []
        tok = 0
        while tok < target:
            rw = row()
            rows.append(rw)
            tok += 60
        if plant:
            v = pod_name(r, pick(r, svcs))
            insert_mid(r, rows, [v, "1/2", "CrashLoopBackOff", f"{r.randrange(9, 41)} ({r.randrange(1, 5)}m ago)", age(r),
                                 f"10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}", pick(r, w.nodes),
                                 "<none>", "<none>"])
            planted = {"checks": [v], "label": "crash-looping pod", "text": f"The pod stuck in CrashLoopBackOff is {v}"}
        body = table(["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"], rows, "   ")
    elif sub == "events":
        args = {"argv": ["get", "events", "-n", ns, "--sort-by=.lastTimestamp"], "context": w.kctx}
        reasons = [("Normal", "Scheduled", "Successfully assigned {ns}/{pod} to {node}"),
                   ("Normal", "Pulled", "Container image \"registry.{org}.internal/{svc}:{tag}\" already present on machine"),
                   ("Warning", "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
                   ("Normal", "Killing", "Stopping container {svc}"),
                   ("Warning", "BackOff", "Back-off restarting failed container {svc} in pod {pod}"),
                   ("Normal", "ScalingReplicaSet", "Scaled up replica set {svc}-{hash} to {n}"),
                   ("Warning", "FailedScheduling", "0/{n} nodes are available: {k} Insufficient memory. preemption: 0/{n} nodes are available"),
                   ("Normal", "SuccessfulCreate", "Created pod: {pod}")]
        def row():
            svc = pick(r, svcs)
            t, reason, msg = pick(r, reasons)
            return [age(r), t, reason, f"pod/{pod_name(r, svc)}",
                    msg.format(ns=ns, pod=pod_name(r, svc), node=pick(r, w.nodes), org=w.org, svc=svc,
                               tag=f"v{r.randrange(1, 4)}.{r.randrange(0, 40)}.{r.randrange(0, 9)}", hash=rs(r, CONS, 10),
                               n=r.randrange(3, 40), k=r.randrange(1, 9))]
        rows, tok = [], 0
        while tok < target:
            rows.append(row())
            tok += est_tokens(" ".join(rows[-1])) + 6
        body = table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows, "   ")
    elif sub == "top":
        args = {"argv": ["top", "pods", "-n", ns, "--containers"], "context": w.kctx}
        rows = [[pod_name(r, s), s, f"{r.randrange(1, 1900)}m", f"{r.randrange(40, 3900)}Mi"]
                for s in (pick(r, svcs) for _ in range(max(3, target // 26)))]
        body = table(["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"], rows, "   ")
    else:
        svc = pick(r, svcs)
        args = {"argv": ["describe", "pods", "-n", ns, "-l", f"app.kubernetes.io/name={svc}"], "context": w.kctx}
        blocks, tok = [], 0
        while tok < target:
            p = pod_name(r, svc)
            b = (f"Name:             {p}\nNamespace:        {ns}\nPriority:         0\nService Account:  {svc}\n"
                 f"Node:             {pick(r, w.nodes)}/10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}\n"
                 f"Start Time:       {(back(now, r, 9e5)).strftime('%a, %d %b %Y %H:%M:%S +0000')}\n"
                 f"Labels:           app.kubernetes.io/name={svc}\n                  pod-template-hash={rs(r, CONS, 10)}\n"
                 f"Status:           Running\nIP:               10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}\n"
                 f"Containers:\n  {svc}:\n    Image:          registry.{w.org}.internal/{svc}:v{r.randrange(1, 4)}.{r.randrange(0, 40)}.{r.randrange(0, 9)}\n"
                 f"    Image ID:       registry.{w.org}.internal/{svc}@sha256:{hx(r, 64)}\n"
                 f"    Port:           {pick(r, [8080, 8443, 9090, 3000])}/TCP\n    State:          Running\n"
                 f"    Ready:          True\n    Restart Count:  {r.randrange(0, 4)}\n"
                 f"    Limits:\n      cpu:     {r.randrange(1, 4)}\n      memory:  {pick(r, ['512Mi', '1Gi', '2Gi', '4Gi'])}\n"
                 f"    Requests:\n      cpu:     {r.randrange(100, 900)}m\n      memory:  {pick(r, ['256Mi', '512Mi', '1Gi'])}\n"
                 f"    Liveness:       http-get http://:8080/healthz delay=10s timeout=2s period=10s #success=1 #failure=3\n"
                 f"    Mounts:\n      /var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-{rs(r, CONS, 5)} (ro)\n"
                 f"      /etc/{svc}/base from cfg-base (ro)\n"
                 "@@MOUNT@@"
                 f"Conditions:\n  Type              Status\n  Initialized       True\n  Ready             True\n"
                 f"  ContainersReady   True\n  PodScheduled      True\n"
                 f"Events:\n  Type    Reason   Age   From     Message\n  ----    ------   ----  ----     -------\n"
                 f"  Normal  Pulled   {age(r)}   kubelet  Container image already present on machine\n")
            blocks.append(b)
            tok += est_tokens(b)
        k = r.randrange(len(blocks))
        for i in range(len(blocks)):
            extra = ""
            if plant and i == k:
                v = f"/etc/{svc}/overrides/{pick(r, ['pool', 'limits', 'routes', 'flags', 'tls'])}-{hx(r, 6)}.yaml"
                extra = f"      {v} from cfg-override (ro)\n"
                planted = {"checks": [v], "label": "override file mounted into the pod",
                           "text": f"The override config mounted into the {svc} pod is {v}"}
            blocks[i] = blocks[i].replace("@@MOUNT@@", extra)
        body = "\n\n".join(blocks)
    return args, pre + body, planted


LOG_MSGS = ["upstream connect error or disconnect/reset before headers", "retrying request", "flushed batch",
            "cache miss", "request completed", "lease renewed", "slow query", "circuit half-open",
            "token refreshed", "consumer rebalanced", "pool exhausted, waiting", "healthcheck ok",
            "published event", "deadline exceeded calling downstream", "write acknowledged"]


def oc_logs(r, w, now, target, plant=None):
    svc = pick(r, w.services)
    fmt = pick(r, ["logfmt", "json", "nginx", "log4j"]) if not plant else pick(r, ["logfmt", "json"])
    keyset = pick(r, [("service", "query", "since"), ("svc", "q", "window"), ("source", "filter", "lookback")])
    args = {keyset[0]: svc, keyset[1]: pick(r, ["level:error", "status>=500", "*", "msg:timeout", "level:(warn OR error)"]),
            keyset[2]: pick(r, ["15m", "1h", "90m", "3h", "24h"]), "limit": pick(r, [200, 500, 1000])}
    n = max(3, target // {"logfmt": 84, "json": 100, "nginx": 60, "log4j": 46}[fmt])
    times = ts_seq(r, now, n, 5400)
    lines = []
    for t in times:
        lvl = wpick(r, [(8, "info"), (3, "warn"), (2, "error"), (1, "debug")])
        tid = hx(r, 32)
        msg = pick(r, LOG_MSGS)
        if fmt == "logfmt":
            lines.append(f'ts={iso(t)} level={lvl} svc={svc} msg="{msg}" latency_ms={r.randrange(1, 2400)} '
                         f'trace_id={tid} span_id={hx(r, 16)} pod={pod_name(r, svc)}')
        elif fmt == "json":
            lines.append(json.dumps({"@timestamp": iso(t), "severity": lvl.upper(), "logger": f"{svc}.{pick(r, ['http', 'db', 'kafka', 'grpc'])}",
                                     "message": msg, "trace": tid, "dur": round(r.uniform(0.2, 2400), 1),
                                     "kubernetes": {"pod": pod_name(r, svc), "node": pick(r, w.nodes)}}, separators=(",", ":")))
        elif fmt == "nginx":
            path = pick(r, ["/v1/charges", "/v2/sessions", "/healthz", "/v1/refunds", "/api/cart/items", "/v1/fx/quote"])
            q = pick(r, ["", f"?limit={r.randrange(10, 100)}", f"?cursor={hx(r, 12)}", "?expand=lines"])
            st = wpick(r, [(20, 200), (2, 404), (2, 502), (1, 504), (2, 201), (1, 429)])
            lines.append(f'10.{r.randrange(0, 255)}.{r.randrange(0, 255)}.{r.randrange(1, 254)} - - [{t.strftime("%d/%b/%Y:%H:%M:%S +0000")}] '
                         f'"{pick(r, ["GET", "POST", "GET", "PUT"])} {path}{q} HTTP/1.1" {st} {r.randrange(80, 9000)} "-" '
                         f'"{pick(r, ["okhttp/4.12.0", "python-requests/2.31.0", "Go-http-client/2.0", "curl/8.5.0"])}" {r.uniform(0.001, 2.5):.3f}')
        else:
            lines.append(f"{t.strftime('%Y-%m-%d %H:%M:%S')},{t.microsecond // 1000:03d} {lvl.upper():5} "
                         f"[{pick(r, ['main', 'pool-3-thread-7', 'kafka-consumer-2', 'grpc-default-executor-4'])}] "
                         f"c.{w.org[:3]}.{svc.split('-')[0]}.{pick(r, ['ShardWriter', 'HttpHandler', 'OutboxRelay', 'RetryPolicy'])} - {msg}")
    planted = None
    if plant == "identifier":
        v = hx(r, 32)
        t = times[len(times) // 2]
        if fmt == "logfmt":
            line = (f'ts={iso(t)} level=error svc={svc} msg="unhandled rejection in settlement path" status=500 '
                    f'trace_id={v} span_id={hx(r, 16)} pod={pod_name(r, svc)}')
        else:
            line = json.dumps({"@timestamp": iso(t), "severity": "ERROR", "logger": f"{svc}.settle", "message": "unhandled rejection in settlement path",
                               "status": 500, "trace": v, "kubernetes": {"pod": pod_name(r, svc), "node": pick(r, w.nodes)}}, separators=(",", ":"))
        insert_mid(r, lines, line)
        planted = {"checks": [v], "label": "trace id of the request that 500'd",
                   "text": f"Trace id of the failing settlement request: {v}"}
    elif plant == "path":
        v = f"/srv/{svc}/conf.d/{pick(r, ['20-upstreams', '40-ratelimit', '10-tls', '30-routes'])}.{hx(r, 4)}.toml"
        t = times[len(times) // 2]
        if fmt == "logfmt":
            line = f'ts={iso(t)} level=error svc={svc} msg="config reload rejected" file={v} line={r.randrange(3, 300)}'
        else:
            line = json.dumps({"@timestamp": iso(t), "severity": "ERROR", "logger": f"{svc}.config", "message": "config reload rejected",
                               "file": v, "line": r.randrange(3, 300)}, separators=(",", ":"))
        insert_mid(r, lines, line)
        planted = {"checks": [v], "label": "config file the reload rejects",
                   "text": f"The config file whose reload is rejected is {v}"}
    head = "" if chance(r, 0.6) else f"# {len(lines)} results (showing newest last) from index logs-{w.org}-{now.strftime('%Y.%m.%d')}\n"
    return args, head + "\n".join(lines), planted


def oc_promql(r, w, now, target, plant=None):
    svc = pick(r, w.services)
    expr = pick(r, [f'histogram_quantile(0.99, sum by (le, pod) (rate(http_server_duration_seconds_bucket{{service="{svc}"}}[5m])))',
                    f'sum by (pod) (rate(http_requests_total{{service="{svc}",code=~"5.."}}[1m]))',
                    f'container_memory_working_set_bytes{{namespace="{w.ns[svc]}",container="{svc}"}}',
                    f'kafka_consumergroup_lag{{topic="{pick(r, w.topics)}"}}'])
    step = pick(r, [15, 30, 60])
    npts = r.randrange(12, 40)
    args = {"query": expr, "start": iso(now - timedelta(seconds=step * npts), ms=False), "end": iso(now, ms=False), "step": f"{step}s"}
    series = []
    nser = max(1, target // (npts * 10 + 40))
    base_ts = int(now.timestamp()) - step * npts
    for _ in range(nser):
        lvl = r.uniform(0.01, 2.0)
        series.append({"metric": {"pod": pod_name(r, svc), "service": svc, "namespace": w.ns[svc]},
                       "values": [[base_ts + step * i, f"{max(0.0, lvl * r.uniform(0.7, 1.3)):.4g}"] for i in range(npts)]})
    planted = None
    if plant == "identifier":
        v = pod_name(r, svc)
        series.insert(r.randrange(len(series) + 1), {"metric": {"pod": v, "service": svc, "namespace": w.ns[svc]},
                      "values": [[base_ts + step * i, f"{r.uniform(6, 14):.4g}"] for i in range(npts)]})
        planted = {"checks": [v], "label": "pod whose series is far above the rest",
                   "text": f"The outlier pod in the p99/5xx query is {v}"}
    body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
    return args, json.dumps(body, separators=(",", ":")), planted


def oc_incidents(r, w, now, target, plant=None):
    keys = pick(r, [("ref", "ttl", "svc", "urg", "st", "opened", "lnk"), ("handle", "summary", "component", "sev", "state", "since", "refs")])
    args = {"op": "list", "filter": {keys[4]: pick(r, [["triggered", "acknowledged"], ["open"], ["resolved"]])},
            "limit": pick(r, [25, 50, 100])}
    items = []
    def inc():
        s = pick(r, w.services)
        return {keys[0]: f"INC-{r.randrange(10000, 99999)}", keys[1]: f"{s}: {pick(r, ['elevated 5xx', 'p99 latency SLO burn', 'consumer lag', 'disk pressure', 'cert expiry < 7d', 'error budget 2x burn'])}",
                keys[2]: s, keys[3]: pick(r, ["high", "low", "P2", "P3", "SEV3"]), keys[4]: pick(r, ["resolved", "acknowledged", "triggered"]),
                keys[5]: iso(back(now, r, 6e5)), "assignee": pick(r, w.people),
                keys[6]: [{"rel": "dash", "href": f"https://grafana.{w.org}.internal/d/{rs(r, B36, 9)}/{s}?orgId=1&from=now-6h"},
                          {"rel": "chat", "href": f"https://chat.{w.org}.internal/archives/C0{rs(r, UPN, 8)}"}],
                "notes": r.randrange(0, 14)}
    compact = chance(r, 0.5)
    tok = 0
    while tok < target:
        items.append(inc())
        tok += est_tokens(jdump(items[-1], compact=compact))
    planted = None
    if plant:
        it = inc()
        if plant == "identifier":
            v = f"INC-{r.randrange(10000, 99999)}"
            it[keys[0]] = v
            it[keys[4]] = "acknowledged"
            it[keys[1]] = f"{it[keys[2]]}: settlement retries piling up (possible dup of today's page)"
            planted = {"checks": [v], "label": "incident already open for the settlement retries",
                       "text": f"The already-open incident for the settlement retries is {v}"}
        else:
            v = (f"https://grafana.{w.org}.internal/d/{rs(r, B36, 9)}/{it[keys[2]]}-saturation?orgId={r.randrange(2, 9)}"
                 f"&var-cluster={w.kctx}&from=now-{pick(r, ['3h', '12h', '2d'])}&to=now&viewPanel={r.randrange(2, 40)}")
            it[keys[6]][0]["href"] = v
            it[keys[6]][0]["rel"] = "primary-dash"
            planted = {"checks": [v], "label": "dashboard link on the saturation incident",
                       "text": f"Saturation dashboard for {it[keys[2]]}: {v}"}
        insert_mid(r, items, it)
    body = {"data": items, "page": {"next": hx(r, 16) if chance(r, 0.5) else None, "count": len(items)}}
    return args, jdump(body, compact=compact), planted


def oc_sh(r, w, now, target, plant=None):
    host = pick(r, w.hosts)
    kind = ("grep" if plant == "path" else "gitlog" if plant == "identifier" else
            pick(r, ["df", "journal", "curl", "dig", "grep", "gitlog", "ss"]))
    planted = None
    if kind == "grep":
        args = {"cmd": "grep -rn 'upstream' /etc/envoy/ /srv/*/conf.d/ 2>/dev/null | head -n 400", "host": host}
        def row():
            s = pick(r, w.services)
            return (f"{pick(r, ['/etc/envoy/clusters/', '/srv/' + s + '/conf.d/'])}{s}-{pick(r, ['a', 'b', 'main', 'shadow'])}.yaml:"
                    f"{r.randrange(2, 400)}:    upstream: {pick(r, w.hosts)}:{pick(r, [8080, 8443, 9000])}")
        lines = fill_rows(r, target, row)
        if plant:
            s = pick(r, w.services)
            v = f"/etc/envoy/clusters/{s}-legacy-{hx(r, 5)}.yaml"
            insert_mid(r, lines, f"{v}:{r.randrange(2, 90)}:    upstream: {s}-old.{w.org}.internal:8080   # TODO remove after cutover")
            planted = {"checks": [v], "label": "file that still points at the old upstream",
                       "text": f"The envoy config still pointing at the old upstream is {v}"}
        out = "\n".join(lines) + "\n[exit 0]"
    elif kind == "gitlog":
        repo = pick(r, ["infra-live", "platform-charts", "payments-monorepo", "edge-config"])
        args = {"cmd": f"cd ~/src/{repo} && git log --oneline --no-decorate -n 300", "host": "devbox"}
        verbs = ["bump", "fix", "revert", "chore:", "feat:", "tune", "pin", "drop", "add"]
        lines = fill_rows(r, target, lambda: f"{hx(r, 10)} {pick(r, verbs)} {pick(r, w.services)} {pick(r, ['timeouts', 'replicas', 'image tag', 'HPA targets', 'alert thresholds', 'probe paths', 'resource limits'])}")
        if plant:
            v = hx(r, 10)
            s = pick(r, w.services)
            insert_mid(r, lines, f"{v} tune {s} db pool max_conns 40 -> 12 (cost)")
            planted = {"checks": [v], "label": "commit that shrank the DB pool",
                       "text": f"The commit that cut the {s} DB pool size is {v}"}
        out = "\n".join(lines)
    elif kind == "df":
        args = {"cmd": "df -hT && du -sh /var/log/* | sort -h | tail -n 40", "host": host}
        lines = ["Filesystem     Type     Size  Used Avail Use% Mounted on"]
        lines += fill_rows(r, target, lambda: f"/dev/nvme{r.randrange(0, 4)}n1p{r.randrange(1, 4)} ext4  {r.randrange(20, 500)}G  {r.randrange(5, 400)}G  {r.randrange(1, 100)}G  {r.randrange(10, 99)}% /var/lib/{pick(r, ['docker', 'kubelet', 'containerd', 'postgresql'])}/{hx(r, 6)}")
        out = "\n".join(lines) + "\n[exit 0]"
    elif kind == "journal":
        svc = pick(r, w.services)
        args = {"cmd": f"journalctl -u {svc} --since '-2h' --no-pager", "host": host}
        times = ts_seq(r, now, max(3, target // 30), 7200)
        out = "\n".join(f"{t.strftime('%b %d %H:%M:%S')} {host.split('.')[0]} {svc}[{r.randrange(900, 65000)}]: {pick(r, LOG_MSGS)} (attempt={r.randrange(1, 5)})" for t in times)
    elif kind == "curl":
        h = pick(r, w.hosts)
        args = {"cmd": f"curl -sv https://{h}/healthz?deep=1", "host": "bastion"}
        head = (f"*   Trying 10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}:443...\n* Connected to {h} port 443\n"
                f"* ALPN: server accepted h2\n* SSL connection using TLSv1.3 / TLS_AES_128_GCM_SHA256\n"
                f"> GET /healthz?deep=1 HTTP/2\n> Host: {h}\n> user-agent: curl/8.5.0\n>\n< HTTP/2 200\n< content-type: application/json\n")
        checks = [{"name": f"{pick(r, ['db', 'cache', 'kafka', 'downstream', 'vault'])}-{i}", "ok": chance(r, 0.9),
                   "ms": r.randrange(1, 900)} for i in range(max(2, target // 18))]
        out = head + json.dumps({"status": "ok", "checks": checks}, separators=(",", ":"))
    elif kind == "dig":
        h = pick(r, w.hosts)
        args = {"cmd": f"for i in $(seq 1 20); do dig +short {h}; done", "host": "bastion"}
        out = "\n".join(f"10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}" for _ in range(max(10, target // 8)))
    else:
        args = {"cmd": "ss -tanp state established | head -n 300", "host": host}
        lines = ["Recv-Q Send-Q Local Address:Port  Peer Address:Port Process"]
        lines += fill_rows(r, target, lambda: f"0      0      10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}:{r.randrange(1024, 65535)}  10.{r.randrange(16, 64)}.{r.randrange(0, 255)}.{r.randrange(2, 254)}:{pick(r, [5432, 6379, 9092, 443, 8080])} users:((\"{pick(r, w.services)}\",pid={r.randrange(100, 60000)},fd={r.randrange(3, 900)}))")
        out = "\n".join(lines)
    return args, out, planted


def oc_tfplan(r, w, now, target, plant=None):
    reg = pick(r, w.regions)
    svc = pick(r, w.services)
    args = {"workdir": f"infra/live/prod/{reg}/{svc}", "cmd": "plan", "flags": ["-lock-timeout=120s", "-no-color"]}
    res_types = ["aws_security_group_rule", "aws_iam_role_policy", "aws_lb_target_group", "aws_autoscaling_group",
                 "aws_cloudwatch_metric_alarm", "aws_elasticache_parameter_group", "aws_route53_record"]
    blocks, tok = [], 0
    while tok < target:
        t = pick(r, res_types)
        name = f"{svc.replace('-', '_')}_{pick(r, ['main', 'canary', 'replica', 'blue', 'green'])}"
        act = pick(r, ["will be updated in-place", "will be created", "must be replaced", "will be updated in-place"])
        sym = {"will be created": "+", "must be replaced": "-/+"}.get(act, "~")
        b = (f"  # {t}.{name} {act}\n  {sym} resource \"{t}\" \"{name}\" {{\n"
             f"      ~ {pick(r, ['threshold', 'max_size', 'deregistration_delay', 'ttl', 'description'])} = "
             f"{r.randrange(1, 900)} -> {r.randrange(1, 900)}\n"
             f"        id   = \"{pick(r, ['sgr-', 'tg-', 'asg-', 'alarm-'])}{hx(r, 17)}\"\n"
             f"        tags = {{\n            \"owner\" = \"{svc}\"\n            \"env\"   = \"prod\"\n        }}\n"
             f"        # (4 unchanged attributes hidden)\n    }}\n")
        blocks.append(b)
        tok += est_tokens(b)
    planted = None
    if plant:
        v = f"sg-0{hx(r, 16)}"
        insert_mid(r, blocks, (f"  # aws_security_group.{svc.replace('-', '_')}_ingress must be replaced\n"
                               f"-/+ resource \"aws_security_group\" \"{svc.replace('-', '_')}_ingress\" {{\n"
                               f"      ~ id          = \"{v}\" -> (known after apply)\n"
                               f"      ~ name        = \"{svc}-ingress\" -> \"{svc}-ingress-v2\" # forces replacement\n    }}\n"))
        planted = {"checks": [v], "label": "security group the plan wants to replace",
                   "text": f"The plan replaces security group {v}"}
    head = (f"Acquiring state lock. This may take a few moments...\nRefreshing state... [id={svc}-{hx(r, 8)}]\n\n"
            "Terraform used the selected providers to generate the following execution plan. Resource actions are\n"
            "indicated with the following symbols:\n  + create\n  ~ update in-place\n-/+ destroy and then create replacement\n\n"
            "Terraform will perform the following actions:\n\n")
    tail = f"\nPlan: {r.randrange(0, 5)} to add, {len(blocks)} to change, {r.randrange(0, 3)} to destroy.\nReleasing state lock. This may take a few moments..."
    return args, head + "\n".join(blocks) + tail, planted


def oc_runbook(r, w, now, target, plant=None):
    svc = pick(r, w.services)
    slug = f"{svc}/{pick(r, ['failover', 'high-latency', 'consumer-lag', 'disk-pressure', 'cert-rotation'])}"
    args = {"slug": slug, "rev": pick(r, ["latest", "main", f"r{r.randrange(10, 300)}"])}
    parts = [f"# Runbook: {slug}\n\n_Owner: {pick(r, w.people)} · last reviewed {back(now, r, 9e6).strftime('%Y-%m-%d')}_\n\n"
             "> Boilerplate: follow the incident process. Page the IC before any destructive step. "
             "Nothing here replaces judgement.\n"]
    tok = 80
    i = 1
    while tok < target:
        step = (f"\n## Step {i}: {pick(r, ['Confirm the alert', 'Check saturation', 'Drain traffic', 'Inspect recent deploys', 'Scale out', 'Verify recovery'])}\n\n"
                f"{pick(r, ['Run', 'Use', 'Try'])} the following and compare against the baseline panel:\n\n```sh\n"
                f"kubectl -n {w.ns[svc]} {pick(r, ['get hpa', 'rollout status deploy/' + svc, 'top pods', 'get pdb'])}\n"
                f"curl -s https://{pick(r, w.hosts)}/metrics | grep {pick(r, ['_total', 'pool_', 'lag', 'inflight'])}\n```\n\n"
                f"- If {pick(r, ['p99', 'error rate', 'lag', 'CPU'])} is above {r.randrange(2, 90)}{pick(r, ['%', 'ms', 's', 'k'])} for "
                f"{r.randrange(2, 15)} minutes, continue.\n- Otherwise note it in the channel and stop here.\n"
                f"- See also [panel {r.randrange(1, 40)}](https://grafana.{w.org}.internal/d/{rs(r, B36, 9)}/{svc}?viewPanel={r.randrange(1, 40)}).\n")
        parts.append(step)
        tok += est_tokens(step)
        i += 1
    planted = None
    if plant:
        v = f"scripts/breakglass/{svc}-{pick(r, ['promote-replica', 'flush-queue', 'rotate-keys', 'reset-pool'])}-{hx(r, 4)}.sh"
        k = r.randrange(1, len(parts)) if len(parts) > 1 else 1
        parts.insert(k, f"\n### Break-glass\n\nOnly with IC approval: `./{v} --confirm`. It is idempotent but noisy.\n")
        planted = {"checks": [v], "label": "break-glass script the runbook points to",
                   "text": f"Break-glass script for {svc}: {v}"}
    return args, "".join(parts), planted


ONCALL_TOOLS = {
    # name: (fn, weight, plantable kinds, error styles)
    "kubectl": (oc_kubectl, 5, ("identifier", "path"), ("go", "exit")),
    "search_logs": (oc_logs, 5, ("identifier", "path"), ("grpc", "problem")),
    "prom_query": (oc_promql, 3, ("identifier",), ("problem",)),
    "incidents": (oc_incidents, 2, ("identifier", "path"), ("problem",)),
    "shell": (oc_sh, 4, ("identifier", "path"), ("exit", "go")),
    "terraform": (oc_tfplan, 2, ("identifier",), ("go", "exit")),
    "runbook": (oc_runbook, 1, ("path",), ()),
}


# --------------------------------------------------------------------------
# mlops tools
# --------------------------------------------------------------------------

ADJ = ["brisk", "quiet", "amber", "lunar", "woven", "gentle", "rapid", "frosty", "hollow", "vivid", "mellow", "dusty"]
NOUN = ["river", "lantern", "meadow", "comet", "harbor", "cedar", "pebble", "glacier", "orchard", "ember", "dune", "fjord"]


def run_name(r):
    return f"{pick(r, ADJ)}-{pick(r, NOUN)}-{r.randrange(1, 400)}"


def ml_search_runs(r, w, now, target, plant=None):
    exp = pick(r, w.experiments)
    metric = pick(r, ["val_loss", "eval/ppl", "val_auc", "wer"])
    args = {"experiment_names": [exp], "filter_string": pick(r, ["attributes.status = 'FINISHED'", f"metrics.{metric} < 3",
                                                                  "params.optimizer = 'adamw'", "tags.sweep = 'true'"]),
            "order_by": [f"metrics.{metric} ASC"], "max_results": pick(r, [100, 250, 500]), "output": "csv"}
    hdr = ["run_id", "run_name", "status", "start_time", "params.lr", "params.batch_size", "params.warmup_steps",
           f"metrics.{metric}", "metrics.tokens_per_sec", "tags.git_sha"]
    def row(m=None):
        return ",".join([hx(r, 32), run_name(r), pick(r, ["FINISHED", "FINISHED", "FAILED", "KILLED"]),
                         iso(back(now, r, 2e6), ms=False), f"{r.choice([1, 2, 3, 5, 6])}e-{r.randrange(4, 6)}",
                         str(pick(r, [16, 32, 64, 128, 256])), str(pick(r, [0, 500, 1000, 2000])),
                         f"{m if m is not None else r.uniform(1.9, 3.4):.4f}", str(r.randrange(9000, 90000)), hx(r, 7)])
    rows = fill_rows(r, target, row)
    planted = None
    if plant:
        line = row(1.7123 - r.uniform(0, 0.1))
        v = line.split(",")[0]
        insert_mid(r, rows, line)
        planted = {"checks": [v], "label": f"run with the lowest {metric}",
                   "text": f"Best run in {exp} by {metric}: {v}"}
    return args, ",".join(hdr) + "\n" + "\n".join(rows), planted


def ml_get_run(r, w, now, target, plant=None):
    rid = hx(r, 32)
    args = {"run_id": rid, "include": pick(r, [["params", "metrics", "tags"], ["metrics"], ["params", "tags"]])}
    params = [{"key": k, "value": str(v)} for k, v in [("lr", f"{r.randrange(1, 9)}e-{r.randrange(4, 6)}"), ("optimizer", "adamw"),
              ("betas", "(0.9, 0.95)"), ("weight_decay", pick(r, [0.0, 0.01, 0.1])), ("seq_len", pick(r, [1024, 2048, 4096])),
              ("grad_clip", 1.0), ("precision", pick(r, ["bf16-mixed", "fp16", "32"])), ("seed", r.randrange(0, 9999))]]
    metrics = []
    compact = chance(r, 0.5)
    tok = 200
    while tok < target:
        name = pick(r, ["train/loss", "val/loss", "lr", "grad_norm", "throughput", "val/acc"])
        metrics.append({"key": name, "value": round(r.uniform(0, 3), 5), "timestamp": int(back(now, r, 9e5).timestamp() * 1000),
                        "step": r.randrange(0, 200000)})
        tok += est_tokens(jdump(metrics[-1], compact=compact))
    tags = {"mlflow.user": email_of(pick(r, w.people), f"{w.org}.ai"), "mlflow.runName": run_name(r),
            "cluster": pick(r, w.clusters), "mlflow.source.name": f"train/{pick(r, ['main', 'finetune', 'pretrain'])}.py"}
    planted = None
    loc_key = pick(r, ["artLoc", "artifact_uri", "store"])
    loc = f"{w.bucket}/{w.project}/mlruns/{r.randrange(1, 40)}/{rid}/artifacts"
    if plant == "identifier":
        v = hx(r, 40)
        tags["mlflow.source.git.commit"] = v
        planted = {"checks": [v], "label": "git commit the run was trained from",
                   "text": f"The run {rid[:8]}… was trained from commit {v}"}
    elif plant == "path":
        v = f"gs://{w.org}-ckpt-eu/{w.project}/{run_name(r)}/step_{r.randrange(10, 200) * 1000:06d}/"
        loc = v
        planted = {"checks": [v], "label": "artifact location of that run",
                   "text": f"Artifacts of run {rid[:8]}… are under {v}"}
    body = {"run": {"info": {"run_id": rid, "status": "FINISHED", "start_time": int(back(now, r, 2e6).timestamp() * 1000),
                             "lifecycle_stage": "active", loc_key: loc},
                    "data": {"params": params, "metrics": metrics, "tags": [{"key": k, "value": v} for k, v in tags.items()]}}}
    return args, jdump(body, compact=compact), planted


def ml_config(r, w, now, target, plant=None):
    name = pick(r, w.experiments)
    path = f"conf/experiment/{name}.yaml"
    args = {"path": path, "ref": pick(r, ["HEAD", "main", hx(r, 7)])}
    ds = pick(r, w.datasets)
    lines = [f"# @package _global_\n# generated by sweep tooling, do not hand-edit (edits get clobbered)\ndefaults:\n  - override /model: {pick(r, w.models)}\n"
             f"  - override /trainer: {pick(r, ['ddp', 'fsdp', 'deepspeed_stage2', 'single'])}\n  - _self_\n\nseed: {r.randrange(0, 9999)}\n"
             f"trainer:\n  max_steps: {r.randrange(5, 300) * 1000}\n  precision: bf16-mixed\n  accumulate_grad_batches: {pick(r, [1, 2, 4, 8])}\n"
             f"  val_check_interval: {pick(r, [500, 1000, 2500])}\n"]
    data_block = [f"data:\n  name: {ds}\n  train_uri: @@TRAIN@@\n  val_uri: {w.bucket}/datasets/{ds}/val/part-*.parquet\n"
                  f"  num_workers: {pick(r, [4, 8, 16])}\n  shuffle_buffer: {pick(r, [10000, 50000])}\n"]
    tok = 160
    extra = []
    while tok < target:
        sec = pick(r, ["optim", "sched", "callbacks", "logging", "eval", "tokenizer", "augment"])
        blk = f"{sec}_{len(extra)}:\n" + "".join(
            f"  {pick(r, ['lr', 'beta1', 'beta2', 'eps', 'warmup', 'decay', 'patience', 'every_n', 'topk', 'temperature', 'dropout', 'ema'])}_{j}: "
            f"{pick(r, [r.randrange(0, 9000), round(r.uniform(0, 1), 4), 'true', 'false', 'null', f'{r.randrange(1, 9)}e-{r.randrange(3, 8)}'])}\n"
            for j in range(r.randrange(4, 12)))
        extra.append(blk)
        tok += est_tokens(blk)
    planted = None
    train = f"{w.bucket}/datasets/{ds}/train/part-*.parquet"
    if plant:
        train = f"gs://{w.org}-curated/{ds}/{pick(r, ['dedup', 'filtered', 'v2-clean', 'lang-balanced'])}-{hx(r, 6)}/train-*.parquet"
        planted = {"checks": [train], "label": "training-data URI in the experiment config",
                   "text": f"{name} trains on {train}"}
    data_block[0] = data_block[0].replace("@@TRAIN@@", train)
    parts = lines + extra
    parts.insert(r.randrange(1, len(parts) + 1), data_block[0])
    return args, "\n".join(parts), planted


def ml_tail(r, w, now, target, plant=None):
    job = f"{pick(r, w.models)}-{pick(r, ['ft', 'pt', 'eval'])}-{rs(r, B36, 5)}"
    args = {"job": job, "lines": pick(r, [200, 400, 800]), "grep": pick(r, [None, "step", "eval"])}
    s0 = r.randrange(0, 100) * 1000
    lr = r.uniform(1e-4, 6e-4)
    k = 0
    def line():
        nonlocal k
        k += 1
        if k % 25 == 0:
            return f"[rank0] eval @ step {s0 + k * 10}: val_loss={r.uniform(1.8, 3):.4f} ppl={r.uniform(6, 20):.2f} ({r.randrange(20, 300)}s)"
        return (f"step {s0 + k * 10:>7} | loss {r.uniform(1.8, 3.5):.4f} | lr {lr:.3e} | grad_norm {r.uniform(0.2, 3):.2f} | "
                f"tok/s {grouped(r.randrange(20000, 95000))} | mem {r.uniform(30, 78):.1f}GiB")
    rows = fill_rows(r, target, line)
    head = [f"wandb: Currently logged in as: {pick(r, w.people).split()[0].lower()} ({w.org}). Use `wandb login --relogin` to force relogin",
            f"wandb: ⭐️ View project at https://wandb.ai/{w.org}/{w.project}"]
    planted = None
    if plant:
        v = f"https://wandb.ai/{w.org}/{w.project}/runs/{rs(r, B36, 8)}?nw=nwuser{pick(r, FIRST).lower()}"
        insert_mid(r, rows, f"wandb: 🚀 View run {run_name(r)} at {v}", 0.3, 0.6)
        planted = {"checks": [v], "label": "W&B link of the resumed run",
                   "text": f"W&B page of the resumed {job} run: {v}"}
    return args, "\n".join(head + rows), planted


def ml_ls(r, w, now, target, plant=None):
    rn = run_name(r)
    base = f"gs://{w.org}-ckpt-eu/{w.project}/{rn}/"
    args = {"uri": base, "recursive": True, "long": True}
    def row():
        st = r.randrange(1, 200) * 1000
        f = pick(r, ["model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "optimizer.pt", "trainer_state.json",
                     "rng_state_0.pth", "scheduler.pt", "config.json", "tokenizer.json"])
        return f"{r.uniform(0.001, 9.9):>8.2f} GiB  {iso(back(now, r, 2e6), ms=False)}  {base}step_{st:06d}/{f}"
    rows = fill_rows(r, target, row)
    planted = None
    if plant:
        v = f"{base}step_{r.randrange(10, 200) * 1000 + 500:06d}-best-{hx(r, 4)}/"
        insert_mid(r, rows, f"{r.uniform(2, 9):>8.2f} GiB  {iso(back(now, r, 2e6), ms=False)}  {v}model.safetensors")
        planted = {"checks": [v], "label": "checkpoint dir tagged best",
                   "text": f"The best checkpoint of {rn} is {v}"}
    tail = f"TOTAL: {len(rows)} objects, {r.randrange(50, 900)} GiB"
    return args, "\n".join(rows) + "\n" + tail, planted


def ml_gpu(r, w, now, target, plant=None):
    host = pick(r, w.hosts)
    args = {"host": host, "cmd": "nvidia-smi"}
    blocks = []
    tok = 0
    ngpu = max(1, min(8, target // 110))
    while tok < target:
        hdr = (f"{now.strftime('%a %b %d %H:%M:%S %Y')}\n+-----------------------------------------------------------------------------------------+\n"
               f"| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
               "|-----------------------------------------+------------------------+----------------------+\n"
               "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
               "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
               "|=========================================+========================+======================|\n")
        gpus = "".join(f"|   {i}  NVIDIA {pick(r, ['A100-SXM4-80GB', 'H100 80GB HBM3'])}          On  |   00000000:{r.randrange(10, 99):02X}:00.0 Off |                    0 |\n"
                       f"| N/A   {r.randrange(30, 80)}C    P0            {r.randrange(80, 690)}W /  700W |  {r.randrange(1000, 80000):>5}MiB /  81559MiB |    {r.randrange(0, 100):>3}%      Default |\n"
                       "+-----------------------------------------+------------------------+----------------------+\n" for i in range(ngpu))
        procs = "".join(f"|    {r.randrange(0, 8)}   N/A  N/A    {r.randrange(1000, 99999):>6}      C   python3 -m train.{pick(r, ['main', 'ft'])}   {r.randrange(1000, 79000):>6}MiB |\n"
                        for _ in range(r.randrange(4, 9)))
        b = hdr + gpus + "\n| Processes:                                                                              |\n" + procs
        blocks.append(b)
        tok += est_tokens(b)
    return args, "\n".join(blocks), None


def ml_submit(r, w, now, target, plant=None):
    model = pick(r, w.models)
    spec = {"image": f"europe-docker.pkg.dev/{w.org}/train/{model}:{hx(r, 7)}", "cluster": pick(r, w.clusters),
            "gpus": pick(r, [1, 4, 8, 16, 32]), "entry": ["python", "-m", "train.main", f"+experiment={pick(r, w.experiments)}"],
            "env": {"WANDB_PROJECT": w.project, "NCCL_DEBUG": "WARN"}, "preemptible": chance(r, 0.5)}
    args = {"spec": spec, "dry_run": False}
    hnd = f"tj-{rs(r, B36, 6)}-{rs(r, B36, 4)}"
    queue = []
    compact = chance(r, 0.5)
    tok = 60
    while tok < target:
        queue.append({"h": f"tj-{rs(r, B36, 6)}-{rs(r, B36, 4)}", "owner": pick(r, w.people), "gpus": pick(r, [1, 8, 16]),
                      "prio": pick(r, ["batch", "interactive", "preemptible"]), "wait_s": r.randrange(0, 40000),
                      "state": pick(r, ["QUEUED", "RUNNING", "RUNNING", "PENDING_QUOTA"])})
        tok += est_tokens(jdump(queue[-1], compact=compact))
    planted = None
    if plant:
        v = hnd
        planted = {"checks": [v], "label": "handle of the job that was just queued",
                   "text": f"Handle of the submitted {model} job: {v}"}
    body = {"hnd": hnd, "st": "QUEUED", "pos": len(queue) + 1, "eta_s": r.randrange(60, 20000),
            "cluster_queue": queue, "warnings": ["spec.preemptible=true: checkpoints every 30 min are recommended",
                                                 "queue position is an estimate; fair-share may reorder jobs of the same priority"],
            "echo": spec}
    return args, jdump(body, compact=compact), planted


MLOPS_TOOLS = {
    "search_runs": (ml_search_runs, 4, ("identifier",), ("problem", "grpc")),
    "get_run": (ml_get_run, 3, ("identifier", "path"), ("problem",)),
    "read_config": (ml_config, 2, ("path",), ()),
    "tail_job_log": (ml_tail, 4, ("path",), ("python", "exit")),
    "list_artifacts": (ml_ls, 3, ("path",), ("grpc",)),
    "gpu_status": (ml_gpu, 1, (), ("exit",)),
    "submit_job": (ml_submit, 2, ("identifier",), ("grpc", "python")),
}


# --------------------------------------------------------------------------
# legal tools
# --------------------------------------------------------------------------

CLAUSE_TITLES = ["Definitions", "Term and Termination", "Fees and Payment", "Confidentiality", "Data Protection",
                 "Intellectual Property", "Warranties", "Indemnities", "Limitation of Liability", "Insurance",
                 "Force Majeure", "Assignment", "Notices", "Governing Law", "Dispute Resolution", "Audit Rights",
                 "Service Levels", "Subcontracting", "Non-Solicitation", "Entire Agreement"]
LEGALESE = [
    "Subject to clause {a}, neither party shall be liable to the other for any indirect or consequential loss.",
    "The Supplier shall procure that each Subcontractor complies with obligations no less onerous than those set out herein.",
    "Any notice given under this Agreement shall be in writing and delivered by hand or by recorded delivery.",
    "Nothing in this clause {a} limits either party's liability for fraud or fraudulent misrepresentation.",
    "The Customer may, on not less than {d} days' written notice, terminate this Agreement for convenience.",
    "Each party shall comply with all applicable Data Protection Legislation in connection with the Services.",
    "Fees are exclusive of VAT, which shall be payable in addition at the prevailing rate.",
    "The Supplier warrants that the Deliverables will conform in all material respects with the Specification.",
    "All Intellectual Property Rights in the Background Materials shall remain vested in the party that owns them.",
    "This Agreement constitutes the entire agreement between the parties and supersedes all prior arrangements.",
    "Neither party may assign or novate this Agreement without the prior written consent of the other, such consent not to be unreasonably withheld.",
    "The Supplier shall maintain professional indemnity insurance with a reputable insurer for the Term and {d} months thereafter.",
    "Where a Force Majeure Event continues for more than {d} days, either party may terminate on written notice.",
    "Undisputed invoices shall be paid within {d} days of receipt.",
]
CONF_FOOTER = ("This e-mail and any attachments are confidential and may be legally privileged. If you are not the "
               "intended recipient, please notify the sender immediately and delete it. Do not copy or disclose its "
               "contents to any other person.")


def legalese(r):
    return pick(r, LEGALESE).format(a=f"{r.randrange(1, 25)}.{r.randrange(1, 9)}", d=pick(r, [10, 14, 30, 45, 60, 90]))


def dms_ref(r):
    return f"DMS-{r.randrange(1000000, 9999999)}.v{r.randrange(1, 12)}"


def lg_search(r, w, now, target, plant=None):
    party = pick(r, w.parties)
    args = {"q": f"{pick(r, ['MSA', 'DPA', 'NDA', 'SOW', 'amendment', 'side letter'])} {party}",
            "matter": pick(r, w.matters), "filters": {"doctype": pick(r, [["agreement"], ["agreement", "amendment"], ["correspondence"]])},
            "size": pick(r, [25, 50])}
    def hit():
        t = pick(r, ["MSA", "DPA", "Mutual NDA", "SOW 3", "Amendment No. 2", "Order Form", "Side Letter"])
        return {"docRef": dms_ref(r), "ttl": f"{t} - {pick(r, w.parties)} - {pick(r, ['draft', 'redline', 'clean', 'execution version', 'comments'])}",
                "v": r.randrange(1, 14), "mod": iso(back(now, r, 3e7), ms=False), "by": pick(r, w.lawyers),
                "snip": legalese(r)[:140], "loc": f"https://{w.tenant}.sharepoint.com/sites/Legal/Shared%20Documents/{pick(r, w.matters)}/{hx(r, 8)}.docx",
                "priv": chance(r, 0.4)}
    hits = []
    compact = chance(r, 0.5)
    tok = 60
    while tok < target:
        hits.append(hit())
        tok += est_tokens(jdump(hits[-1], compact=compact))
    planted = None
    if plant:
        h = hit()
        h["ttl"] = f"MSA - {party} - EXECUTED (countersigned)"
        if plant == "identifier":
            v = dms_ref(r)
            h["docRef"] = v
            planted = {"checks": [v], "label": "DMS reference of the executed MSA",
                       "text": f"The executed MSA with {party} is {v} in the DMS"}
        else:
            v = (f"https://{w.tenant}.sharepoint.com/sites/Legal/Shared%20Documents/Executed/{party.split()[0]}_MSA_signed_"
                 f"{hx(r, 6)}.pdf?csf=1&web=1")
            h["loc"] = v
            planted = {"checks": [v], "label": "location of the countersigned MSA PDF",
                       "text": f"The countersigned {party} MSA PDF is at {v}"}
        insert_mid(r, hits, h)
    body = {"total": len(hits) + r.randrange(0, 300), "took_ms": r.randrange(8, 900), "hits": hits}
    return args, jdump(body, compact=compact), planted


def lg_open(r, w, now, target, plant=None):
    ref = dms_ref(r)
    party = pick(r, w.parties)
    args = {"docRef": ref, "render": pick(r, ["html", "html-clean"]), "pages": pick(r, ["all", "1-40"])}
    agr_no = f"{pick(r, ['MSA', 'PSA', 'DPA'])}/{party.split()[0][:4].upper()}/{r.randrange(2019, 2026)}/{r.randrange(10, 99)}"
    planted = None
    if plant == "identifier":
        agr_no = f"{pick(r, ['MSA', 'PSA', 'DPA'])}/{party.split()[0][:4].upper()}/{r.randrange(2019, 2027)}/{r.randrange(100, 999)}-{rs(r, string.ascii_uppercase, 2)}"
        planted = {"checks": [agr_no], "label": "agreement number on the cover page",
                   "text": f"Agreement number of the {party} contract: {agr_no}"}
    parts = [f'<html><head><meta name="agreement-no" content="{agr_no}"><title>{party} - Master Services Agreement</title></head><body>\n'
             f'<div class="cover"><h1>MASTER SERVICES AGREEMENT</h1><p>between {w.client} and {party}</p><p>Ref: {agr_no}</p></div>\n']
    tok = 80
    i = 1
    while tok < target:
        title = CLAUSE_TITLES[(i - 1) % len(CLAUSE_TITLES)]
        paras = "".join(f"<p>{i}.{j} {legalese(r)}</p>\n" for j in range(1, r.randrange(3, 7)))
        blk = f'<div class="clause" id="c-{i}"><h3>{i}. {title}</h3>\n{paras}</div>\n'
        parts.append(blk)
        tok += est_tokens(blk)
        i += 1
    if plant == "path":
        v = f"https://{w.tenant}.sharepoint.com/sites/Legal/Schedules/{party.split()[0]}/Schedule-{r.randrange(2, 9)}-{pick(r, ['SLA', 'Pricing', 'Security', 'Exit'])}-{hx(r, 5)}.xlsx?d=w{hx(r, 12)}"
        k = r.randrange(1, len(parts)) if len(parts) > 1 else 1
        parts.insert(k, f'<p class="xref">The Service Credits are calculated as set out in <a href="{v}">the linked schedule</a>, which forms part of this Agreement.</p>\n')
        planted = {"checks": [v], "label": "link to the service-credit schedule",
                   "text": f"The service-credit schedule of the {party} MSA is linked at {v}"}
    parts.append("</body></html>")
    return args, "".join(parts), planted


def lg_diff(r, w, now, target, plant=None):
    party = pick(r, w.parties)
    a, b = r.randrange(2, 9), 0
    b = a + 1
    args = {"left": f"{dms_ref(r)}", "right": f"{dms_ref(r)}", "mode": "unified", "context": 3}
    out = [f"--- {party} MSA v{a}.docx\n+++ {party} MSA v{b}.docx (their comments)"]
    tok = 20
    while tok < target:
        ln = r.randrange(10, 900)
        h = (f"@@ -{ln},{7} +{ln},{8} @@\n  {legalese(r)}\n- {legalese(r)}\n+ {legalese(r)}\n+ [{pick(r, w.lawyers).split()[0]}: "
             f"{pick(r, ['please explain', 'not acceptable as drafted', 'agreed', 'we need this for our insurers', 'see our cover email'])}]\n  {legalese(r)}\n")
        out.append(h)
        tok += est_tokens(h)
    return args, "\n".join(out), None


def lg_issues(r, w, now, target, plant=None):
    party = pick(r, w.parties)
    args = {"matter": pick(r, w.matters), "view": "issues-list", "counterparty": party}
    rows = []
    tok = 40
    while tok < target:
        c = r.randrange(1, 25)
        rows.append([f"{c}.{r.randrange(1, 9)}", CLAUSE_TITLES[c % len(CLAUSE_TITLES)],
                     pick(r, ["deleted our cap", "wants mutual", "asks for 90 days", "added audit right", "softened to reasonable endeavours", "no change"]),
                     pick(r, ["hold firm", "accept", "counter", "escalate to partner", "park"]),
                     pick(r, ["H", "M", "L"]), pick(r, w.lawyers).split()[0]])
        tok += 22
    return args, f"## Issues list — {party}\n\n" + md_table(["Cl.", "Heading", "Their position", "Our response", "Risk", "Owner"], rows), None


def lg_mail(r, w, now, target, plant=None):
    party = pick(r, w.parties)
    args = {"folder": pick(r, ["Inbox/Matters", "Sent", "Archive/2026"]), "q": f"from:{party.split()[0].lower()} OR subject:MSA", "max": 20}
    host = re.sub(r"[^a-z]", "", party.lower())[:10] + ".example"
    msgs, tok = [], 0
    while tok < target:
        sender = pick(r, w.people)
        body = " ".join(legalese(r) if chance(r, 0.4) else pick(r, [
            "Thanks for the turnaround.", "Our client is keen to sign this month.", "Please see our comments in the attached.",
            "We can't accept the deletion of 12.3 without something in return.", "Happy to jump on a call Thursday.",
            "Noted — we will revert shortly.", "Apologies for the delay, we were waiting on the business."]) for _ in range(r.randrange(2, 6)))
        m = (f"From: {sender} <{email_of(sender, host)}>\nSent: {back(now, r, 2e6).strftime('%A, %d %B %Y %H:%M')}\n"
             f"To: {pick(r, w.lawyers)}\nSubject: RE: {party} MSA - comments\n\n{body}\n\nKind regards,\n{sender}\n\n{CONF_FOOTER}\n")
        msgs.append(m)
        tok += est_tokens(m)
    planted = None
    if plant:
        sender = pick(r, w.people)
        if plant == "identifier":
            v = uuid4(r, upper=True)
            line = f"The signing envelope has gone out — DocuSign envelope ID {v}. It expires in 10 days."
            planted = {"checks": [v], "label": "DocuSign envelope id in their email",
                       "text": f"DocuSign envelope for the {party} signature: {v}"}
        else:
            v = f"https://dataroom.{host}/s/{rs(r, B58, 12)}/{party.split()[0]}-disclosure-{r.randrange(1, 9)}?pwd=0&dl=1"
            line = f"The disclosure bundle is uploaded here: {v} (link valid 14 days)."
            planted = {"checks": [v], "label": "data-room link in their email",
                       "text": f"{party}'s disclosure bundle: {v}"}
        m = (f"From: {sender} <{email_of(sender, host)}>\nSent: {back(now, r, 9e4).strftime('%A, %d %B %Y %H:%M')}\n"
             f"Subject: RE: {party} MSA - next steps\n\nHi all,\n\n{legalese(r)} {line} {legalese(r)}\n\nBest,\n{sender}\n\n{CONF_FOOTER}\n")
        insert_mid(r, msgs, m)
    sep = "\n" + "-" * 32 + " Original Message " + "-" * 32 + "\n"
    return args, sep.join(msgs), planted


def citation(r):
    return pick(r, [f"[{r.randrange(1995, 2025)}] EWHC {r.randrange(10, 3999)} ({pick(r, ['Comm', 'Ch', 'TCC', 'QB'])})",
                    f"[{r.randrange(1995, 2025)}] EWCA Civ {r.randrange(10, 1999)}",
                    f"{r.randrange(100, 999)} F.{pick(r, ['3d', '4th', 'Supp. 3d'])} {r.randrange(1, 1500)} ({pick(r, ['2d', '9th', '3d', '7th'])} Cir. {r.randrange(1995, 2025)})",
                    f"{r.randrange(2000, 2025)} ONCA {r.randrange(10, 999)}", f"[{r.randrange(2000, 2025)}] NSWSC {r.randrange(10, 1999)}"])


def lg_caselaw(r, w, now, target, plant=None):
    topic = pick(r, ["limitation of liability wilful default", "termination for convenience good faith", "consequential loss meaning",
                     "reasonable endeavours obligation", "liquidated damages penalty rule", "implied duty to cooperate"])
    args = {"q": topic, "jurisdictions": pick(r, [["EW"], ["EW", "SG"], ["NY", "DE"], ["ON"], ["NSW"]]), "limit": 40}
    items, tok, i = [], 0, 1
    while tok < target:
        it = (f"{i}. **{pick(r, LAST)} v {pick(r, LEGAL_PARTIES)}** {citation(r)}\n   > …{legalese(r)}…\n"
              f"   Treatment: {pick(r, ['followed', 'distinguished', 'considered', 'applied', 'doubted'])} · cited by {r.randrange(0, 300)}\n")
        items.append(it)
        tok += est_tokens(it)
        i += 1
    planted = None
    if plant:
        v = citation(r)
        it = (f"{i}. **{pick(r, LAST)} Holdings v {pick(r, LEGAL_PARTIES)}** {v}\n   > …the exclusion did not extend to losses flowing from a deliberate "
              f"refusal to perform…\n   Treatment: applied · cited by {r.randrange(0, 300)}\n")
        insert_mid(r, items, it)
        planted = {"checks": [v], "label": "the authority that is squarely on point",
                   "text": f"The on-point authority on {topic}: {v}"}
    return args, f"{len(items)} results for \"{topic}\"\n\n" + "".join(items), planted


LEGAL_TOOLS = {
    "dms_search": (lg_search, 4, ("identifier", "path"), ("problem",)),
    "open_document": (lg_open, 4, ("identifier", "path"), ("java",)),
    "compare_versions": (lg_diff, 2, (), ("java",)),
    "issues_list": (lg_issues, 2, (), ("problem",)),
    "mailbox_search": (lg_mail, 3, ("identifier", "path"), ("node",)),
    "caselaw_search": (lg_caselaw, 2, ("identifier",), ("problem", "node")),
}


# --------------------------------------------------------------------------
# shop tools
# --------------------------------------------------------------------------

def sku(r):
    return f"{pick(r, ['HL', 'FJ', 'PB', 'MS', 'KT', 'TX'])}-{rs(r, string.ascii_uppercase, 3)}-{r.randrange(100, 9999):04d}"


def order_no(r):
    return f"#{r.randrange(1000000, 9999999)}"


def price(r, lo=4, hi=240):
    return f"{r.uniform(lo, hi):.2f}"


def sh_orders(r, w, now, target, plant=None):
    camp = pick(r, w.campaigns)
    args = {"method": "GET", "path": "/admin/api/2025-10/orders",
            "params": {"status": pick(r, ["unfulfilled", "any", "open"]), "tag": camp, "limit": 250,
                       "created_at_min": iso(back(now, r, 6e5), ms=False)}}
    def od():
        lines = [{"s": sku(r), "q": r.randrange(1, 4), "p": price(r)} for _ in range(r.randrange(1, 4))]
        return {"n": order_no(r), "st": pick(r, ["unfulfilled", "partial", "fulfilled", "on_hold"]),
                "fin": pick(r, ["paid", "paid", "authorized", "refunded", "partially_refunded"]),
                "tot": price(r, 12, 600), "cur": w.currency, "ln": lines, "cx": f"cus_{rs(r, B58, 14)}",
                "ts": iso(back(now, r, 6e5), ms=False), "risk": pick(r, ["low", "low", "low", "medium"]),
                "shp": {"cc": pick(r, ["NL", "DE", "FR", "GB", "ES", "PL", "IE", "BE"]), "m": pick(r, w.carriers)}}
    orders = []
    compact = chance(r, 0.5)
    tok = 40
    while tok < target:
        orders.append(od())
        tok += est_tokens(jdump(orders[-1], compact=compact))
    planted = None
    if plant:
        o = od()
        v = order_no(r)
        o.update({"n": v, "risk": "high", "st": "on_hold", "flags": ["addr_mismatch", "velocity_3_cards_1h"]})
        insert_mid(r, orders, o)
        planted = {"checks": [v], "label": "order the fraud rule put on hold",
                   "text": f"Order held by the fraud rule: {v}"}
    body = {"o": orders, "nxt": f"page_info={rs(r, B58, 24)}" if chance(r, 0.6) else None, "x-ratelimit": f"{r.randrange(1, 40)}/40"}
    return args, jdump(body, compact=compact), planted


def sh_inventory(r, w, now, target, plant=None):
    wh = pick(r, w.warehouses)
    args = {"warehouse": wh, "format": "csv", "fields": "sku,title,on_hand,reserved,inbound,bin,updated"}
    def row(oversold=False, s=None):
        on = r.randrange(0, 400)
        res = on + r.randrange(5, 40) if oversold else r.randrange(0, max(1, on))
        t = pick(r, w.products)
        t = f'"{t}"' if "," in t or chance(r, 0.3) else t
        return f"{s or sku(r)},{t},{on},{res},{r.randrange(0, 500)},{wh}-{pick(r, 'ABCDEFG')}{r.randrange(1, 40):02d}-{r.randrange(1, 9)},{iso(back(now, r, 9e4), ms=False)}"
    rows = fill_rows(r, target, row)
    planted = None
    if plant:
        v = sku(r)
        insert_mid(r, rows, row(True, v))
        planted = {"checks": [v], "label": "SKU where reserved exceeds on-hand",
                   "text": f"Oversold SKU in {wh}: {v}"}
    return args, "sku,title,on_hand,reserved,inbound,bin,updated\n" + "\n".join(rows), planted


def sh_rates(r, w, now, target, plant=None):
    cc = pick(r, ["NO", "CH", "US", "AU", "JP", "CA", "IS"])
    args = {"from": pick(r, w.warehouses), "to_country": cc, "parcels": [{"weight_g": r.randrange(200, 9000), "dims_cm": [r.randrange(10, 60) for _ in range(3)]}]}
    rows = []
    tok = 60
    while tok < target:
        rows.append([pick(r, w.carriers), pick(r, ["Express", "Economy", "Standard", "Saver", "Priority"]), f"{r.randrange(1, 9)}–{r.randrange(9, 15)}d",
                     f"{price(r, 6, 90)} {w.currency}", pick(r, ["DDP", "DAP"]), pick(r, ["yes", "no"]), f"{r.uniform(0.1, 6):.1f}%"])
        tok += 29
    note = "\n\n_Quotes valid 24h. Fuel surcharge included where stated. Duties estimated, not guaranteed._"
    return args, f"### Quotes {args['from']} → {cc}\n\n" + md_table(["Carrier", "Service", "Transit", "Price", "Incoterm", "Tracking", "Claims rate"], rows) + note, None


def sh_storefront(r, w, now, target, plant=None):
    prod = pick(r, w.products)
    handle = re.sub(r"[^a-z0-9]+", "-", prod.lower()).strip("-")
    args = {"url": f"https://{w.slug}.example/products/{handle}", "render_js": chance(r, 0.5), "selector": pick(r, ["main", "body", "#product"])}
    parts = [f'<main id="product" data-handle="{handle}">\n<h1 class="title">{prod}</h1>\n<span class="price">{price(r)} {w.currency}</span>\n']
    tok = 40
    while tok < target:
        blk = (f'<div class="card" data-sku="{sku(r)}"><a href="/products/{handle}?variant={r.randrange(10**12, 10**13)}">'
               f'<img src="https://cdn.{w.slug}.example/files/{hx(r, 8)}_{pick(r, [360, 540, 720])}x.webp?v={r.randrange(10**9, 10**10)}" '
               f'alt="{pick(r, w.products)}" loading="lazy"></a><p class="meta">{pick(r, ["In stock", "Low stock", "Back soon", "Pre-order"])}'
               f' · ★ {r.uniform(3.5, 5):.1f} ({r.randrange(2, 900)})</p></div>\n')
        parts.append(blk)
        tok += est_tokens(blk)
    planted = None
    if plant:
        v = f"https://cdn.{w.slug}.example/files/{handle}-hero-{hx(r, 6)}.jpg?width={pick(r, [1600, 2048])}&crop=center&v={r.randrange(10**9, 10**10)}"
        insert_mid(r, parts, f'<picture class="hero"><img src="{v}" alt="{prod}" onerror="this.dataset.broken=1"></picture>\n<!-- hero returns 404 since the re-upload -->\n')
        planted = {"checks": [v], "label": "hero image URL that 404s",
                   "text": f"Broken hero image on the {prod} page: {v}"}
    parts.append("</main>")
    return args, "".join(parts), planted


def sh_payments(r, w, now, target, plant=None):
    args = {"stream": "payments", "since": pick(r, ["-1h", "-6h", "-24h"]), "grep": pick(r, ["charge.", "refund.", "payout.", ""])}
    times = ts_seq(r, now, max(3, target // 62), 86400)
    ev = ["charge.succeeded", "charge.refunded", "payment_intent.created", "charge.dispute.created", "payout.paid", "charge.failed"]
    lines = [f"[{t.strftime('%Y-%m-%d %H:%M:%S')}.{t.microsecond // 1000:03d}] {pick(r, ['INFO ', 'INFO ', 'WARN '])} {pick(r, ev)} "
             f"pi_{rs(r, B58, 24)} amount={r.randrange(400, 60000)} currency={w.currency.lower()} customer=cus_{rs(r, B58, 14)} "
             f"attempt={r.randrange(1, 3)}" for t in times]
    planted = None
    if plant:
        v = f"pi_{rs(r, B58, 24)}"
        amt = r.randrange(400, 60000)
        t = times[len(times) // 2]
        cx = f"cus_{rs(r, B58, 14)}"
        dup = (f"[{t.strftime('%Y-%m-%d %H:%M:%S')}.{t.microsecond // 1000:03d}] WARN  charge.captured_twice {v} amount={amt} "
               f"currency={w.currency.lower()} customer={cx} captures=2 idempotency_key=null")
        insert_mid(r, lines, dup)
        planted = {"checks": [v], "label": "payment intent that was captured twice",
                   "text": f"The double-captured payment intent is {v}"}
    return args, "\n".join(lines), planted


def sh_sql(r, w, now, target, plant=None):
    q = pick(r, ["select customer_id, count(*) as disputes, sum(amount)/100.0 as eur from disputes where created_at > now() - interval '90 days' group by 1 order by 2 desc",
                 "select o.name, o.financial_status, o.total_price, o.created_at from orders o where o.tags @> '{wholesale}' order by created_at desc",
                 "select sku, sum(qty) from order_lines where created_at::date = current_date - 1 group by 1 order by 2 desc"])
    args = {"sql": q, "db": "shop_ro", "timeout_ms": 30000}
    cols = ["customer_id", "disputes", "eur", "first_seen", "segment"]
    def row():
        return [f"cus_{rs(r, B58, 14)}", str(r.randrange(1, 4)), f"{r.uniform(10, 900):.2f}", back(now, r, 3e7).strftime("%Y-%m-%d"),
                pick(r, ["retail", "wholesale", "vip", "new"])]
    rows = []
    tok = 30
    while tok < target:
        rows.append(row())
        tok += 31
    planted = None
    if plant:
        v = f"cus_{rs(r, B58, 14)}"
        rw = row()
        rw[0], rw[1] = v, str(r.randrange(9, 17))
        rows.insert(r.randrange(0, min(3, len(rows)) + 1), rw)
        planted = {"checks": [v], "label": "customer with by far the most disputes",
                   "text": f"Customer with the most disputes in 90 days: {v}"}
    widths = [max(len(c), *(len(x[i]) for x in rows)) for i, c in enumerate(cols)]
    out = [" " + " | ".join(c.ljust(wd) for c, wd in zip(cols, widths)), "-" + "-+-".join("-" * wd for wd in widths) + "-"]
    out += [" " + " | ".join(x.ljust(wd) for x, wd in zip(rw, widths)) for rw in rows]
    out.append(f"({len(rows)} rows)")
    return args, "\n".join(out), planted


SHOP_TOOLS = {
    "admin_api": (sh_orders, 4, ("identifier",), ("problem", "node")),
    "inventory_export": (sh_inventory, 3, ("identifier",), ("rust",)),
    "shipping_quotes": (sh_rates, 2, (), ("rust", "problem")),
    "fetch_page": (sh_storefront, 3, ("path",), ("node",)),
    "payments_tail": (sh_payments, 3, ("identifier",), ("rust",)),
    "sql_readonly": (sh_sql, 3, ("identifier",), ("exit",)),
}

TOOLSETS = {"oncall": ONCALL_TOOLS, "mlops": MLOPS_TOOLS, "legal": LEGAL_TOOLS, "shop": SHOP_TOOLS}


# --------------------------------------------------------------------------
# error formats (planted errors and filler failures)
# --------------------------------------------------------------------------

ERR_WORDS = {
    "oncall": (["Lease", "Shard", "Fence", "Quorum", "Replica", "Ledger", "Upstream", "Circuit", "Snapshot", "Partition",
                "Conntrack", "Outbox", "Cursor", "Epoch"], ["LDG", "EDG", "NET", "PGX", "KFK", "OBX"],
               "com.{org}.settle", "github.com/{org}/ledger", ["renewing the lease", "writing shard {n}", "rebalancing partitions",
                                                              "replaying the outbox", "applying migration 00{n}"]),
    "mlops": (["Checkpoint", "Shard", "Tokenizer", "Gradient", "Optimizer", "Dataloader", "Rank", "Collective", "Manifest",
               "Registry", "Sweep", "Bucket", "Vocab", "Mesh"], ["TRN", "CKP", "NCL", "DSX", "REG", "EVL"],
              "ai.{org}.trainer", "github.com/{org}/jobctl", ["resuming from step {n}000", "all-reducing bucket {n}",
                                                             "loading shard {n} of 64", "registering model version {n}"]),
    "legal": (["Redline", "Clause", "Envelope", "Signature", "Template", "Revision", "Matter", "Watermark", "Bundle",
               "Exhibit", "Docket", "Retention", "Recipient", "Tracked"], ["DMS", "ESN", "DCV", "MTR", "RDL"],
              "com.{org}.docs.convert", "github.com/{org}/dms-sync", ["merging tracked changes", "stamping revision {n}",
                                                                     "routing envelope to signer {n}", "applying the retention label"]),
    "shop": (["Reservation", "Cart", "Refund", "Fulfilment", "Voucher", "Checkout", "Stock", "Payout", "Parcel", "Label",
              "Webhook", "Tax", "Bundle", "Variant"], ["INV", "PAY", "FUL", "CHK", "TAX", "WHK"],
             "com.{org}.commerce", "github.com/{org}/stockd", ["reserving {n} units", "capturing the payment",
                                                              "creating the shipping label", "replaying webhook {n}"]),
}
ERR_STATES = ["Conflict", "Expired", "Mismatch", "Exhausted", "Stale", "Fenced", "Overflow", "Rejected", "Locked",
              "Unavailable", "Drift", "Corrupt", "Orphaned", "Skew", "Quarantined", "Truncated"]
GRPC_CODES = ["FailedPrecondition", "ResourceExhausted", "Aborted", "Unavailable", "DeadlineExceeded", "Internal", "PermissionDenied"]
HTTP_CODES = [(409, "Conflict"), (422, "Unprocessable Content"), (423, "Locked"), (429, "Too Many Requests"),
              (503, "Service Unavailable"), (412, "Precondition Failed"), (500, "Internal Server Error")]


def snake_up(a, b):
    return f"{a}_{b}".upper()


def err_spec(r, domain, taken=()):
    words, pfx, _, _, _ = ERR_WORDS[domain]
    for _ in range(200):
        a, b = pick(r, words), pick(r, ERR_STATES)
        code = f"{pick(r, pfx)}-{r.randrange(1000, 9999)}"
        if a + b not in taken and code not in taken:
            return a, b, code
    return a, b, code


def _frames_java(r, pkg, k):
    cls = ["Writer", "Coordinator", "Handler", "Pipeline", "Merger", "Service", "Repository", "Client"]
    out = []
    for _ in range(k):
        c = pick(r, cls)
        out.append(f"\tat {pkg}.{pick(r, ['core', 'io', 'impl', 'api'])}.{pick(r, ['Default', 'Async', 'Retrying', ''])}{c}."
                   f"{pick(r, ['apply', 'run', 'handle', 'process', 'lambda$submit$3', 'invoke'])}({c}.java:{r.randrange(30, 900)})")
    out += [f"\tat java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1144)",
            f"\tat java.base/java.lang.Thread.run(Thread.java:1583)"]
    return "\n".join(out)


def fmt_error(r, style, domain, w, a, b, code, frames=None, svc=None):
    """-> (text, checks). Planted errors carry a unique name and a unique code."""
    _, _, jpkg, gomod, ops = ERR_WORDS[domain]
    org = getattr(w, "org", None) or getattr(w, "slug", None) or getattr(w, "tenant", "acme")
    jpkg, gomod = jpkg.format(org=org.replace("-", "")), gomod.format(org=org)
    op = pick(r, ops).format(n=r.randrange(2, 99))
    k = frames if frames is not None else r.randrange(8, 30)
    camel = a + b
    if style == "problem":
        st, title = pick(r, HTTP_CODES)
        slug = f"{a.lower()}-{b.lower()}"
        key = pick(r, ["errorCode", "code", "x-err", "reason_code"])
        host = f"api.{org}.example"
        body = {"type": f"https://{host}/problems/{slug}", "title": f"{a} {b.lower()}", "status": st,
                "detail": f"{a.lower()} {b.lower()} while {op}", "instance": f"/v{r.randrange(1, 4)}/{pick(r, ['docs', 'jobs', 'orders', 'runs', 'queries'])}/{hx(r, 12)}",
                key: code, "traceId": hx(r, 32)}
        if chance(r, 0.5):
            body["errors"] = [{"pointer": f"/{pick(r, ['data', 'spec', 'meta'])}/{pick(r, ['version', 'etag', 'lock', 'qty'])}", "detail": "stale"}
                              for _ in range(r.randrange(1, 4))]
        text = (f"HTTP/1.1 {st} {title}\ncontent-type: application/problem+json\nx-request-id: {uuid4(r)}\n"
                f"retry-after: {r.randrange(1, 60)}\n\n" + json.dumps(body, indent=2))
        return text, [slug, code]
    if style == "grpc":
        reason = snake_up(a, b)
        pre = "".join(f"{iso(w.t0 + timedelta(seconds=r.randrange(0, int(w.span_s))))} WARN retrying call (attempt {i}/5): "
                      f"rpc error: code = Unavailable desc = connection reset\n" for i in range(1, r.randrange(2, 6)))
        text = (pre + f"ERROR: rpc error: code = {pick(r, GRPC_CODES)} desc = {a.lower()} {b.lower()} while {op} (ref {code})\n"
                f"error details: name = ErrorInfo reason = {reason} domain = {pick(r, ['ledger', 'jobs', 'dms', 'stock'])}.{org}.internal "
                f"metadata = map[attempt:{r.randrange(1, 6)} node:{rs(r, LOW, 6)}-{r.randrange(1, 40)} epoch:{r.randrange(100, 9999)}]\n"
                + "".join(f"  at {gomod}/internal/{pick(r, ['rpc', 'client', 'retry'])}.(*{pick(r, ['Conn', 'Stub', 'Invoker'])}).{pick(r, ['Invoke', 'call', 'do'])}:{r.randrange(20, 500)}\n" for _ in range(max(2, k // 3))))
        return text, [reason, code]
    if style == "java":
        exc = f"{camel}Exception"
        text = (f"Exception in thread \"{pick(r, ['main', 'worker-3', 'pool-2-thread-1', 'convert-7'])}\" {jpkg}.{exc}: "
                f"{a.lower()} {b.lower()} while {op} [code={code}]\n" + _frames_java(r, jpkg, k) +
                f"\nCaused by: java.util.concurrent.TimeoutException: waited {r.randrange(5, 120)}s for lock\n" + _frames_java(r, jpkg, max(2, k // 3)) +
                f"\n\t... {r.randrange(5, 40)} more")
        return text, [exc, code]
    if style == "go":
        ename = f"Err{camel}"
        frames_txt = "".join(f"{gomod}/internal/{pick(r, ['shard', 'lease', 'sync', 'store', 'queue'])}.(*{pick(r, ['Manager', 'Writer', 'Client', 'Loop'])}).{pick(r, ['Run', 'apply', 'flush', 'Acquire'])}(0x{hx(r, 10)}, {{0x{hx(r, 6)}, 0x{r.randrange(1, 99):x}}})\n"
                             f"\t/src/{gomod}/internal/{pick(r, ['shard', 'lease', 'sync', 'store', 'queue'])}/{pick(r, ['manager', 'writer', 'loop', 'client'])}.go:{r.randrange(20, 800)} +0x{hx(r, 3)}\n" for _ in range(max(2, k // 2)))
        text = (f"Error: {op}: {gomod.split('/')[-1]}.{ename}: {a.lower()} {b.lower()} (code={code})\n"
                f"panic: {ename} [recovered]\n\ngoroutine {r.randrange(1, 900)} [running]:\n" + frames_txt + "exit status 2")
        return text, [ename, code]
    if style == "python":
        exc = f"{camel}Error"
        pkg = jpkg.split(".")[-1]
        frames_txt = "".join(f"  File \"/opt/conda/lib/python3.11/site-packages/{pick(r, ['torch/distributed', 'lightning/pytorch', 'datasets', pkg])}/"
                             f"{pick(r, ['checkpoint', 'trainer', 'loops', 'io', 'utils'])}/{pick(r, ['_io', 'fit_loop', 'state', 'core', 'api'])}.py\", line {r.randrange(20, 1900)}, in {pick(r, ['run', '_load', 'advance', 'wrapped', '__call__'])}\n"
                             f"    {pick(r, ['return fn(*args, **kwargs)', 'self._restore(state)', 'batch = next(it)', 'out = self.step(batch)'])}\n" for _ in range(k))
        text = (f"Traceback (most recent call last):\n{frames_txt}{pkg}.errors.{exc}: {a.lower()} {b.lower()} while {op} (code={code})")
        return text, [exc, code]
    if style == "node":
        ename = f"ERR_{snake_up(a, b)}"
        frames_txt = "".join(f"    at {pick(r, ['Object.<anonymous>', 'async Promise.all (index 0)', 'processTicksAndRejections', 'Router.handle', 'Client.request'])} "
                             f"(/app/dist/{pick(r, ['lib', 'routes', 'workers'])}/{pick(r, ['sync', 'envelope', 'render', 'cart'])}.js:{r.randrange(10, 900)}:{r.randrange(3, 40)})\n" for _ in range(max(3, k // 2)))
        text = (f"node:internal/process/promises:289\n            triggerUncaughtException(err, true /* fromPromise */);\n            ^\n\n"
                f"Error [{ename}]: {a.lower()} {b.lower()} while {op}\n{frames_txt}{{\n  code: '{ename}',\n  errno: -{r.randrange(1, 140)},\n"
                f"  ref: '{code}'\n}}\n\nNode.js v20.{r.randrange(9, 18)}.{r.randrange(0, 3)}")
        return text, [ename, code]
    if style == "rust":
        variant = camel
        frames_txt = "".join(f"  {i}: {pick(r, ['stockd', 'tokio', 'hyper', 'tower'])}::{pick(r, ['svc', 'runtime', 'proto', 'util'])}::{pick(r, ['call', 'poll', 'run', 'handle'])}\n"
                             f"             at ./src/{pick(r, ['reserve', 'ledger', 'api', 'worker'])}.rs:{r.randrange(10, 700)}:{r.randrange(5, 40)}\n" for i in range(max(3, k // 2)))
        text = (f"Error: {variant} {{ code: \"{code}\", detail: \"{a.lower()} {b.lower()} while {op}\" }}\n\nCaused by:\n"
                f"    0: {op} failed after {r.randrange(2, 6)} attempts\n    1: version check failed: expected {r.randrange(10, 900)}, found {r.randrange(10, 900)}\n\n"
                f"Stack backtrace:\n{frames_txt}")
        return text, [variant, code]
    # exit: a shell command that dies with a nonzero status
    kebab = f"{a.lower()}-{b.lower()}"
    pre = "".join(f"{pick(r, ['==>', '[info]', '-->'])} {pick(r, ['step', 'phase', 'task'])} {i}: {pick(r, ['ok', 'ok', 'skipped', 'ok (cached)'])}\n"
                  for i in range(1, max(3, k)))
    text = (pre + f"fatal: {kebab}: {op} failed (errno {code})\nhint: re-run with --verbose for the full log\n"
            f"[process exited with code {pick(r, [1, 2, 3, 64, 70, 75, 78, 137])}]")
    return text, [kebab, code]


def transient_error(r, w, tool):
    """A boring, non-planted failure (retried).  Same text every time -> realistic boilerplate."""
    lines = [f"{pick(r, ['WARN', 'warn', 'W'])} upstream returned 503, backing off {2 ** i * 100}ms (attempt {i + 1}/6)" for i in range(6)]
    lines.append(f"error: {tool}: giving up after 6 attempts: service unavailable (try again later)")
    return "\n".join(lines * 3)


# --------------------------------------------------------------------------
# planted facts: values and phrasings
# --------------------------------------------------------------------------

def amount_str(r, domain):
    x = r.randrange(12, 960) * pick(r, [10, 25, 50])
    fmts = [lambda: f"${grouped(x)}", lambda: f"€{grouped(x)}", lambda: f"£{grouped(x)}", lambda: f"{grouped(x, '.')} €",
            lambda: f"CHF {grouped(x)}", lambda: f"A${grouped(x)}", lambda: f"USD {grouped(x)}",
            lambda: f"${x / 1000:.1f}k".replace(".0k", "k"), lambda: f"R$ {grouped(x, '.')}"]
    if domain == "mlops" and chance(r, 0.4):
        return f"{grouped(r.randrange(30, 900) * 10)} GPU-hours"
    return pick(r, fmts)()


def future_date(r, w):
    d = w.t0 + timedelta(days=r.randrange(21, 240))
    f = r.randrange(6)
    if f == 0:
        return f"{d.day} {d.strftime('%B %Y')}"
    if f == 1:
        return f"{d.strftime('%A')} {d.day} {d.strftime('%B')}"
    if f == 2:
        return f"the {ordinal(d.day)} of {d.strftime('%B')}"
    if f == 3:
        return f"{d.strftime('%B')} {ordinal(d.day)}"
    if f == 4:
        return d.strftime("%Y-%m-%d")
    return f"{d.strftime('%d/%m/%Y')}"


BANNED = {
    "oncall": ["istio 1.17", "helm 2", "Consul Connect", "nginx-ingress 0.x", "cert-manager v0.16", "Calico eBPF mode",
               "Kubernetes Dashboard", "spot instances for stateful sets", "Weave Net", "Elasticsearch 6"],
    "mlops": ["DeepSpeed ZeRO-3", "bitsandbytes", "flash-attn 1.x", "apex.amp", "horovod", "Ray Tune", "tensorflow-addons",
              "xformers 0.0.2x", "the LAION subset", "synthetic GPT-4 labels"],
    "legal": ["the 2019 side letter", "the Harbison memo", "any Westlaw KeyCite printouts", "the draft term sheet from Klein",
              "the superseded Schedule 7", "Robert's handwritten notes", "the pre-merger NDA", "the unsigned 2021 amendment"],
    "shop": ["Klarna", "AfterPay", "the Rivet loyalty plugin", "moment.js", "jQuery 1.x", "Brightline Courier", "Oxbow Freight",
             "Parcelwise", "SwiftKiwi", "Redkite Logistics", "dropshipping from Cargoloop"],
}
FORUMS = ["Rotterdam", "Zug", "Tallinn", "Valletta", "Reno, Nevada", "the Cayman Islands", "Limassol", "Gibraltar", "Vaduz", "Douglas, Isle of Man"]

BUDGET_T = ["hard limit on spend for {thing} is {v}, please don't make me explain an overage to finance",
            "we can't go past {v} on {thing}, full stop",
            "cap {thing} at {v}",
            "spend no more than {v} on {thing} — that includes the retries and anything we forget to turn off",
            "the ceiling for {thing} is {v} and nobody is raising it this quarter",
            "{v}. that's the number for {thing}. not a cent over",
            "budget-wise {thing} is {v} all in; anything above that is a no-go",
            "keep {thing} under {v}, I mean it this time",
            "finance capped {thing} at {v} — if it looks like we'll cross that, stop and ask",
            "the most we can put toward {thing} is {v}"]
THINGS = {"oncall": ["the extra capacity", "cloud spend on this fix", "the incident overtime", "the temporary nodes"],
          "mlops": ["the sweep", "compute for this ablation", "the eval reruns", "the fine-tune"],
          "legal": ["outside counsel fees on this matter", "the expert report", "the translation work", "e-discovery"],
          "shop": ["the promo", "expedited re-ships", "the influencer boxes", "paid social this week"]}
REGION_T = ["{v} is a no-go for anything with customer data",
            "absolutely not {v} — residency, don't ask",
            "keep everything out of {v}",
            "nothing gets scheduled in {v}, we got burned there in the spring",
            "don't even think about {v} for this",
            "whatever happens, {v} stays off the list"]
BAN_T = ["keep {v} out of it", "{v} is a no-go", "absolutely not {v}", "do NOT pull in {v}, it's on the blocklist",
         "{v}? no. never again.", "whatever we do, {v} stays out", "leave {v} out of this entirely",
         "we're not touching {v}, legal and security both said so"]
FORUM_T = ["the forum can't be {v}, that's non-negotiable for the board",
           "absolutely not {v} as the seat of arbitration",
           "{v} as governing law/venue is a no-go",
           "keep {v} out of the dispute clause, whatever they offer in exchange"]
DEADLINE_T = ["hard stop is {v}", "this has to land by {v}, no extensions", "we can't go past {v} — the regulator won't move",
              "cutoff {v}, 17:00 CET", "deadline: {v}. not negotiable", "everything has to be signed off before {v}",
              "{v} is the absolute latest", "if it isn't done by {v} it doesn't ship this cycle"]
LIMIT_T = {
    "oncall": [("max {n} replicas on the canary, hard limit", "{n} replicas", (3, 9)),
               ("p99 can't go past {n} ms on checkout, that's the SLO we sold", "{n} ms", (151, 799)),
               ("no more than {n} restarts an hour before we page a human", "{n} restarts", (3, 19)),
               ("keep the error rate under {n} per mille during the cutover", "{n} per mille", (2, 9))],
    "mlops": [("batch size caps at {n} per device or we OOM on the small cards", "{n} per device", (6, 97)),
              ("no more than {n} concurrent jobs on the shared pool", "{n} concurrent jobs", (3, 17)),
              ("context length can't go past {n} tokens for this model", "{n} tokens", (1025, 16383)),
              ("eval has to finish inside {n} minutes or the nightly breaks", "{n} minutes", (11, 89))],
    "legal": [("liability cap can't go past {n} months' fees", "{n} months' fees", (7, 37)),
              ("notice period no shorter than {n} days", "{n} days", (31, 179)),
              ("auto-renewal terms max {n} months, anything longer is a no-go", "{n} months", (7, 47)),
              ("we will not accept payment terms longer than {n} days", "{n} days", (31, 119))],
    "shop": [("don't discount below {n}% margin", "{n}% margin", (11, 47)),
             ("max {n} units per customer on the drop", "{n} units per customer", (2, 9)),
             ("free-shipping threshold stays at €{n}", "€{n}", (41, 149)),
             ("never more than {n} SKUs in a single bundle", "{n} SKUs", (3, 8))],
}


def fact_constraint(r, w, domain, taken, sub):
    if sub == "budget":
        v = amount_str(r, domain)
        while v in taken:
            v = amount_str(r, domain)
        thing = pick(r, THINGS[domain])
        return {"checks": [v], "sentence": pick(r, BUDGET_T).format(v=v, thing=thing),
                "text": f"Spending ceiling for {thing}: {v}"}
    if sub == "region":
        pool = [x for x in (FORUMS if domain == "legal" else FACT_REGIONS) if x not in taken] or FACT_REGIONS
        v = pick(r, pool)
        return {"checks": [v], "sentence": pick(r, FORUM_T if domain == "legal" else REGION_T).format(v=v),
                "text": f"{v} is excluded ({'forum/governing law' if domain == 'legal' else 'region'})"}
    if sub == "ban":
        pool = [x for x in BANNED[domain] if x not in taken] or BANNED[domain]
        v = pick(r, pool)
        return {"checks": [v], "sentence": pick(r, BAN_T).format(v=v), "text": f"Do not use {v}"}
    if sub == "deadline":
        v = future_date(r, w)
        while v in taken:
            v = future_date(r, w)
        return {"checks": [v], "sentence": pick(r, DEADLINE_T).format(v=v), "text": f"Deadline: {v}"}
    tmpl, chk, (lo, hi) = pick(r, LIMIT_T[domain])
    n = r.randrange(lo, hi)
    c = chk.format(n=n)
    while c in taken:
        n = r.randrange(lo, hi)
        c = chk.format(n=n)
    return {"checks": [c], "sentence": tmpl.format(n=n), "text": tmpl.format(n=n)}


CONSTRAINT_SUBS = ["budget", "region", "ban", "deadline", "limit"]

# (category, values, templates) -- the check is the value; most templates never say "prefer"
PREFS = [
    ("lang", ["Portuguese", "Dutch", "Polish", "Turkish", "Indonesian", "Czech", "Finnish", "Vietnamese", "Romanian", "Hungarian", "Ukrainian", "Catalan"],
     ["replies in {v} please", "can you answer in {v} from here on? the people I forward these to read {v}",
      "{v} for the write-ups if you can, my lead doesn't read English well", "switch to {v} for anything customer-facing"]),
    ("temp", ["Celsius", "Fahrenheit"],
     ["I'm more of a {v} person, the other scale means nothing to me", "{v} pls, I can't think in the other one",
      "temps in {v} — I grew up with it"]),
    ("tz", ["America/Bogota", "Asia/Kathmandu", "Pacific/Auckland", "Europe/Lisbon", "America/St_Johns", "Asia/Kolkata", "Australia/Adelaide", "Africa/Nairobi"],
     ["I'm on {v} now, so give times in that", "all timestamps in {v} please, converting in my head is killing me",
      "fwiw I moved, I'm in {v} — schedule stuff accordingly", "quote times as {v}, the UTC stuff keeps tripping me"]),
    ("format", ["bullet points", "tables instead of paragraphs", "one-line answers", "the TL;DR first"],
     ["{v} work better for me than walls of text", "honestly {v} is easiest for me to skim", "give me {v} and I'll ask if I want more",
      "when you summarise, {v} please"]),
    ("datefmt", ["DD.MM.YYYY", "YYYY/MM/DD", "ISO week numbers"],
     ["dates as {v}, the US order trips me up", "can you write dates like {v}? everyone here does",
      "{v} for dates in anything you send me"]),
    ("currency", ["NZ dollars", "Swedish kronor", "South African rand", "Canadian dollars", "Singapore dollars"],
     ["show me money in {v}, I'll never remember the conversion", "amounts in {v} please, that's what the board reads",
      "could you put figures in {v}? our books are in it"]),
    ("nick", ["Bexxy", "Tucker", "Rafa", "Magsy", "Jojo", "Kitto", "Ollie", "Ziggy", "Nando", "Bram", "Teodor", "Lulu", "Fitzy", "Suki", "Pimmy"],
     ["call me {v}, nobody uses my full name", "it's {v} btw, not the formal version", "{v} is fine — everyone calls me that"]),
    ("signoff", ["Ines, Platform Desk", "the Ops Pod", "R. Achterberg (on behalf of the team)", "Team Lantern", "Dana @ Night Shift"],
     ["sign anything you draft for me as '{v}'", "drafts should close with '{v}'", "put '{v}' as the sign-off on emails you write"]),
    ("tool", ["Helix", "K9s", "plotnine", "nushell", "Polars", "Typst", "the Zed editor", "org-mode", "Excalidraw", "Vega-Lite", "ripgrep", "DuckDB"],
     ["I live in {v}, so give me steps for that", "{v} person here, translate anything else", "skip the alternatives, I'm on {v}",
      "if there's a {v} way to do it, that's the one I'll actually use"]),
    ("cmap", ["cividis", "batlow", "the Okabe-Ito palette", "viridis_r"],
     ["I'm colourblind, so {v} for any plots", "plots in {v} or I genuinely can't read them", "{v} for charts, please"]),
    ("units", ["kilometres", "imperial units", "kilograms"],
     ["I think in {v}", "{v} for any physical stuff, my brain doesn't do the other system", "use {v}, that's what the warehouse uses"]),
    ("spelling", ["British spelling", "American spelling", "the Oxford comma"],
     ["{v} in anything client-facing", "we use {v} here, keep it consistent", "{v} please, house style"]),
    ("channel", ["Signal", "Matrix", "Threema", "Telegram"],
     ["if you need me urgently I'm on {v}, not chat", "I basically only check {v} in the evenings", "{v} is the way to reach me off-hours"]),
    ("tone", ["no emoji", "no exclamation marks", "plain text, no markdown headers"],
     ["{v} in stuff I forward to execs", "{v} please, it reads as unserious to my boss", "keep it {v}, that's just how I like it"]),
    ("codestyle", ["tabs not spaces", "2-space indents", "snake_case file names", "kebab-case file names"],
     ["{v} in any snippets", "house rule: {v}", "when you write files for me: {v}"]),
    ("numfmt", ["a decimal comma", "thin-space thousands separators", "two decimal places"],
     ["numbers with {v}, please", "I'm used to {v}", "{v} in tables, it's what the controllers expect"]),
]


def fact_preference(r, w, domain, taken, cat):
    c, values, tmpls = next(p for p in PREFS if p[0] == cat)
    pool = [v for v in values if v not in taken] or values
    v = pick(r, pool)
    return {"checks": [v], "sentence": pick(r, tmpls).format(v=v), "text": f"User preference ({c}): {v}"}


def ident_value(r, w, domain):
    """-> (value, label) for user/assistant-stated identifiers."""
    if domain == "oncall":
        return pick(r, [lambda: (f"INC-{r.randrange(10000, 99999)}", "incident number"),
                        lambda: (f"CHG{r.randrange(1000000, 9999999)}", "change request"),
                        lambda: (f"i-0{hx(r, 16)}", "bad EC2 instance"),
                        lambda: (f"Q{rs(r, string.ascii_uppercase + DIG, 6)}", "PagerDuty incident"),
                        lambda: (hx(r, 12), "release commit"),
                        lambda: (hx(r, 32), "trace id from the customer report")])()
    if domain == "mlops":
        return pick(r, [lambda: (hx(r, 32), "baseline MLflow run"),
                        lambda: (rs(r, B36, 8), "W&B run id"),
                        lambda: (f"sweep-{rs(r, B36, 6)}", "sweep id"),
                        lambda: (f"{pick(r, w.datasets)}@v{r.randrange(2, 40)}-{hx(r, 6)}", "dataset version"),
                        lambda: (f"models:/{pick(r, w.models)}/{r.randrange(2, 90)}", "registry version to promote"),
                        lambda: (f"tj-{rs(r, B36, 6)}-{rs(r, B36, 4)}", "training job")])()
    if domain == "legal":
        return pick(r, [lambda: (f"MTR-{r.randrange(2023, 2027)}-{r.randrange(10000, 99999)}", "matter number"),
                        lambda: (uuid4(r, upper=True), "DocuSign envelope"),
                        lambda: (dms_ref(r), "DMS reference"),
                        lambda: (citation(r), "case citation"),
                        lambda: (f"PO-{r.randrange(4500000000, 4599999999)}", "purchase order number")])()
    return pick(r, [lambda: (order_no(r), "order number"), lambda: (sku(r), "SKU"),
                    lambda: (f"1Z{rs(r, UPN, 16)}", "tracking number"), lambda: (f"pi_{rs(r, B58, 24)}", "payment intent"),
                    lambda: (f"cus_{rs(r, B58, 14)}", "customer id"), lambda: (f"RMA-{r.randrange(10000, 99999)}-{rs(r, string.ascii_uppercase, 2)}", "return authorisation"),
                    lambda: (f"{pick(r, ['SPRING', 'VIP', 'SORRY', 'WELCOME'])}-{rs(r, UPN, 6)}", "coupon code")])()


def path_value(r, w, domain):
    if domain == "oncall":
        s = pick(r, w.services)
        return pick(r, [lambda: (f"/etc/{s}/{pick(r, ['pool', 'limits', 'routes', 'flags'])}-{hx(r, 6)}.yaml", "config file"),
                        lambda: (f"https://grafana.{w.org}.internal/d/{rs(r, B36, 9)}/{s}-red?orgId={r.randrange(2, 9)}&var-env=prod&from=now-{pick(r, ['6h', '24h', '7d'])}&to=now", "dashboard"),
                        lambda: (f"s3://{w.org}-incident-artifacts/{w.t0.strftime('%Y/%m/%d')}/{s}-heap-{hx(r, 8)}.hprof", "heap dump"),
                        lambda: (f"docs/postmortems/{w.t0.year}/{s}-{pick(r, ['pool-exhaustion', 'retry-storm', 'cert-expiry'])}-{hx(r, 4)}.md", "postmortem draft"),
                        lambda: (f"internal/{pick(r, ['settle', 'ledger', 'outbox'])}/{pick(r, ['retry', 'batch', 'fence'])}_{hx(r, 4)}.go", "source file")])()
    if domain == "mlops":
        return pick(r, [lambda: (f"gs://{w.org}-ckpt-eu/{w.project}/{run_name(r)}/step_{r.randrange(10, 300) * 1000:06d}/", "checkpoint"),
                        lambda: (f"conf/experiment/{pick(r, w.models).split('-')[0]}_{pick(r, ['lora', 'dpo', 'long_ctx', 'distill'])}_{hx(r, 4)}.yaml", "experiment config"),
                        lambda: (f"https://wandb.ai/{w.org}/{w.project}/reports/{pick(r, ['Ablations', 'Eval-summary', 'LR-sweep'])}--Vmlldz{rs(r, B58, 10)}?accessToken={rs(r, B36, 16)}", "W&B report"),
                        lambda: (f"/mnt/fsx/{pick(r, FIRST).lower()}/notebooks/{pick(r, ['eval_breakdown', 'loss_spikes', 'tokenizer_stats'])}_{hx(r, 4)}.ipynb", "notebook"),
                        lambda: (f"s3://{w.org}-evals/{pick(r, w.models)}/{w.t0.strftime('%Y%m%d')}/results-{hx(r, 6)}.jsonl", "eval results")])()
    if domain == "legal":
        return pick(r, [lambda: (f"https://{w.tenant}.sharepoint.com/sites/Legal/Shared%20Documents/{pick(r, w.matters)}/Drafts/{pick(r, w.parties).split()[0]}_{pick(r, ['MSA', 'DPA', 'SOW'])}_v{r.randrange(3, 19)}_{hx(r, 4)}.docx?web=1", "current draft"),
                        lambda: (f"\\\\fs-legal0{r.randrange(1, 4)}\\Matters\\{pick(r, w.matters)}\\Correspondence\\{hx(r, 6)}.msg", "file share copy"),
                        lambda: (f"//dms/matters/{pick(r, w.matters)}/precedents/{pick(r, ['lol-cap', 'indemnity', 'tfc'])}-{hx(r, 5)}.docx", "precedent"),
                        lambda: (f"https://app.docusign.com/documents/details/{uuid4(r)}?view=summary", "envelope page")])()
    return pick(r, [lambda: (f"https://admin.{w.slug}.example/orders?status=unfulfilled&tag={pick(r, w.campaigns)}&page={r.randrange(2, 40)}&sort=created_at%3Adesc", "admin view"),
                    lambda: (f"s3://{w.slug}-exports/{w.t0.strftime('%Y-%m')}/{pick(r, ['refunds', 'chargebacks', 'stock'])}-{hx(r, 6)}.csv", "export file"),
                    lambda: (f"sections/{pick(r, ['cart-drawer', 'product-hero', 'mega-menu'])}-{hx(r, 4)}.liquid", "theme section"),
                    lambda: (f"https://{w.slug}.example/collections/{pick(r, ['sale', 'new-in', 'gifts'])}?filter.v.availability=1&sort_by=price-ascending&utm_campaign={pick(r, w.campaigns)}-{hx(r, 4)}", "collection URL")])()


ID_USER_T = ["the {label} is {v} btw", "for reference, {label}: {v}", "({label} {v})",
             "use {v} — that's the {label} we care about, not the older one", "{label} → {v}",
             "I think the {label} is {v}? yeah, {v}", "{label} per the ticket: {v}", "oh and {v} is the {label}"]
ID_ASSIST_T = ["I've noted the {label}: {v}.", "Tracking this under {v} ({label}).", "For later reference, {label} = `{v}`.",
               "The {label} I'm working from is {v}.", "Recording the {label} here so it doesn't get lost: {v}."]
PATH_USER_T = ["the {label} lives at {v}", "put the output next to the {label}: {v}", "link to the {label}: {v}",
               "({label}: {v})", "{label} is here {v} — ignore the copy next to it", "grab the {label} from {v}"]
PATH_ASSIST_T = ["I saved the {label} to {v}.", "The {label} is at `{v}`.", "Wrote the {label} out to {v} so you can diff it.",
                 "For the record, the {label} I used: {v}"]

DECISIONS = {
    "oncall": [("pgbouncer in transaction mode", "bumping max_connections"), ("a blue-green cutover", "a rolling restart"),
               ("the m7i.2xlarge node pool", "staying on the old instance type"), ("shedding load at the edge with a 429 budget", "scaling the database"),
               ("a feature-flag kill switch for async settlement", "a full rollback"), ("Envoy outlier detection at 5 consecutive 5xx", "manual ejection"),
               ("moving the batch cron to 03:40 UTC", "throttling the batch job"), ("a read replica for the reporting queries", "query timeouts")],
    "mlops": [("cosine decay to a 10% floor", "linear decay"), ("int8 weight-only quantisation", "fp8 everywhere"),
              ("DPO with beta 0.1", "PPO"), ("dropping the noisy crawl shard", "reweighting it"),
              ("FSDP full-shard", "ZeRO-2"), ("early stopping with patience 3", "a fixed step budget"),
              ("a held-out split by customer id", "a random split"), ("promoting the distilled student", "the big teacher")],
    "legal": [("the mutual indemnity", "their one-way wording"), ("a cap at 150% of annual fees", "uncapped liability for data"),
              ("mediation before LCIA arbitration", "going straight to court"), ("their DPA with our security schedule bolted on", "our own DPA"),
              ("a 12-month warranty survival period", "24 months"), ("wet-ink counterparts", "e-signature"),
              ("carving data breaches out of the cap", "a super-cap"), ("a 90-day termination-for-convenience right", "no TfC at all")],
    "shop": [("flat-rate 4.90 shipping", "free shipping over 60"), ("pre-orders with a 20% deposit", "a waitlist"),
             ("a Saturday 10:00 drop", "a Thursday evening drop"), ("refunds as store credit plus 10%", "card refunds"),
             ("bundling the mug with the cold brew kit", "a straight discount"), ("prepaid return labels for the EU", "customer-paid returns"),
             ("holding prices and eating the FX hit", "a 4% price rise"), ("splitting the shipment from two warehouses", "waiting for restock")],
}
DEC_USER_T = ["ok final call: {v}", "we're going to ship {v}", "let's not do {alt}, {v} instead",
              "talked to {p} — it's {v}. done deliberating", "yeah no, {alt} is dead, we go with {v}",
              "decision made: {v}. I'll tell the others", "after all that back and forth: {v}, moving on",
              "FINAL answer from the steering group is {v}"]
DEC_ASSIST_T = ["Final call, per your note: {v}.", "Decision recorded: {v} rather than {alt}.",
                "So we're going with {v} — I'll plan the next steps around that.", "We'll go with {v}; {alt} is off the table.",
                "Agreed — not {alt}; {v} it is."]


def fact_decision(r, w, domain, taken, role):
    pool = [d for d in DECISIONS[domain] if d[0] not in taken]
    if pool:
        v, alt = pick(r, pool)
    else:
        cn = pick(r, [c for c in CODENAMES if f"option {c}" not in taken] or CODENAMES)
        v, alt = f"option {cn}-{r.randrange(2, 9)}", f"option {pick(r, CODENAMES)}"
    t = pick(r, DEC_USER_T if role == "user" else DEC_ASSIST_T)
    return {"checks": [v], "sentence": t.format(v=v, alt=alt, p=pick(r, w.people).split()[0]), "text": f"Decision: {v} (not {alt})"}


# --------------------------------------------------------------------------
# prose (filler)
# --------------------------------------------------------------------------

REQUESTS = {
    "oncall": ["{svc} p99 is spiking again, can you dig in", "we got paged for {svc}, 5xx rate is over 2% in {region}",
               "can you check whether the {svc} rollout actually finished", "why is {svc} restarting every few minutes??",
               "consumer lag on {topic} keeps climbing, figure out what's going on",
               "compare error rates before and after this morning's deploy of {svc}",
               "disk on one of the {region} nodes is at 91%, is it the log volume again",
               "start drafting the incident timeline for the postmortem, we'll fill gaps later",
               "is the cert on {host} expiring soon? someone said it was", "review the terraform plan for the {svc} change before I approve it",
               "can you see if {svc} is still talking to the old upstream", "the synthetic check for checkout is flapping, is it real",
               "what changed in the last 24h that touches {svc}", "pull the runbook for {svc} and tell me which step we're on"],
    "mlops": ["sweep {exp} finished overnight, which configs look best", "loss on the {model} run went flat after ~{k}k steps, any idea why",
              "can you check the eval numbers for {model} vs the baseline", "the dataloader is slow on {cluster}, look at throughput",
              "set up a fine-tune of {model} on {ds} with the usual settings", "what's grad norm doing on the long-context run",
              "find the checkpoint we should promote for {model}", "why did the job on {cluster} get preempted twice",
              "compare the {ds} splits, something's off with the val numbers", "can you check GPU memory on the {cluster} nodes",
              "re-run the eval harness on the last three checkpoints", "is the tokenizer the same between the two runs"],
    "legal": ["review the indemnity section in the {party} MSA redline", "what changed between their last two drafts of the DPA",
              "find the executed NDA with {party}", "summarise their comments on limitation of liability",
              "is there caselaw on excluding wilful default from the cap", "pull the email thread about termination for convenience",
              "prep an issues list for the call with {party} tomorrow", "check whether the {party} SOW references the right MSA",
              "compare their audit clause with our standard position", "has {party} sent the signed signature pages yet",
              "draft a short note to the client on where we are with {party}", "what does our precedent say about service credits"],
    "shop": ["orders from the {camp} drop are stuck in unfulfilled, can you look", "inventory for {wh} looks off vs the storefront",
             "get me shipping quotes to Norway and Switzerland for the big parcels", "customer says they were charged twice, can you check",
             "the {prod} page shows the wrong price on mobile", "pull refunds over 200 from last week",
             "which SKUs are we about to run out of in {wh}", "chargebacks look high this month, who's behind them",
             "check that the {camp} discount actually applied", "why are the product images slow on the collection page",
             "reconcile yesterday's payouts against orders", "are there orders stuck on hold for fraud review"],
}
CONTEXT_BITS = {
    "oncall": ["{person} is IC today", "status page is already updated", "we rolled {svc} {mins} minutes ago",
               "{person} thinks it's DNS (it's never DNS)", "alert fired at {time}", "the canary looked fine at 10%"],
    "mlops": ["{person} launched it with the default config", "we're on the {cluster} queue this week", "eval harness is at HEAD",
              "the baseline is whatever {person} shipped last month", "{k}k steps in so far", "mixed precision is bf16"],
    "legal": ["{person} is the partner on this", "their counsel is slow to respond", "client wants to sign this month",
              "we're on draft {k} now", "the business already agreed pricing", "{person} marked up the PDF by hand"],
    "shop": ["{person} from CX flagged it", "the drop went live at {time}", "support has {k} tickets about it",
             "{wh} said the scanner was down for an hour", "the payment provider had an incident earlier", "it's only on mobile apparently"],
}
COMMENTARY = {
    "oncall": ["Checking the pods in {ns} first.", "Pulling the last hour of logs for {svc}.", "Let me look at the latency histogram.",
               "Looking at open incidents to see if this is already tracked.", "Grepping the envoy configs.", "Running the plan to see the diff.",
               "Checking recent commits.", "Let me confirm with a second query."],
    "mlops": ["Pulling the runs for {exp}.", "Checking the run details.", "Reading the experiment config.", "Tailing the job log.",
              "Listing the checkpoint bucket.", "Checking GPU utilisation on that host.", "Submitting the job.", "Cross-checking with another query."],
    "legal": ["Searching the DMS.", "Opening the document.", "Diffing the two versions.", "Pulling the issues list.",
              "Searching the mailbox for the thread.", "Checking caselaw.", "Let me look at the clause text itself."],
    "shop": ["Querying the admin API.", "Exporting inventory for that warehouse.", "Getting carrier quotes.", "Fetching the product page.",
             "Tailing the payments stream.", "Running a read-only query.", "Double-checking against another source."],
}
FINDINGS = {
    "oncall": ["error rate on {svc} dropped back to {x}% after the restart", "{k} pods were recycled in the last hour",
               "p99 peaked at {ms} ms around {time}", "the HPA is pinned at max replicas", "no deploys touched {svc} in the window",
               "connection pool waits line up with the latency spikes", "lag is recovering at roughly {k}k msgs/min"],
    "mlops": ["val loss is {x} at the latest eval", "throughput sits around {k}k tok/s per node", "two runs diverged after warmup",
              "grad norm spikes line up with the data shard boundary", "the eval harness version matches on both runs",
              "memory headroom is about {k} GiB per GPU", "{k} of the sweep runs failed on preemption"],
    "legal": ["their draft deletes clause {c}", "the cap is now {k}x fees in their version", "the DPA still refers to the old SCCs",
              "three of their comments are cosmetic", "the indemnity is one-way in their markup", "the notice clause now requires post only",
              "clause {c} cross-refers to a schedule that doesn't exist"],
    "shop": ["{k} orders are on hold", "{wh} shows {k} units reserved but unpicked", "the cheapest quote is about {x} {cur}",
             "the discount applied on {k}% of eligible orders", "image payloads average {k}00 KB", "refunds total about {x} {cur} for the week",
             "most chargebacks are 'product not received'"],
}
CLOSERS = ["Let me know if you want me to dig further.", "Want me to keep going on this?", "I can draft the follow-up if useful.",
           "Next I'd check the items above in order.", "Shout if any of this looks wrong.", ""]
SYSTEM_PROMPTS = {
    "oncall": "You are the on-call copilot for the {org} platform team. You have read-only access to production through the tools "
              "below unless the human explicitly approves a write. Always state what you checked. Never paste secrets. "
              "Prefer the least disruptive action. Tools: kubectl (argv list + context), search_logs, prom_query (PromQL over a range), "
              "incidents (incident API), shell (runs on a named host), terraform (plan only), runbook (fetch by slug).",
    "mlops": "You are an ML engineering assistant for the {org} research org. You can search and inspect experiment runs, read "
             "configs from the repo, tail job logs, list bucket artifacts, check GPUs and submit training jobs. Be precise with run ids, "
             "metrics and paths. Do not delete artifacts. Tools: search_runs, get_run, read_config, tail_job_log, list_artifacts, "
             "gpu_status, submit_job.",
    "legal": "You are a contract-review assistant working for {firm}. You can search the DMS, open documents as HTML, compare "
             "versions, read the issues list, search the mailbox and search caselaw. Nothing you write is legal advice until a lawyer "
             "signs off. Keep privileged material privileged. Tools: dms_search, open_document, compare_versions, issues_list, "
             "mailbox_search, caselaw_search.",
    "shop": "You are the operations assistant for {store}. You can call the store admin API, export inventory, quote shipping, "
            "fetch storefront pages, tail the payments stream and run read-only SQL. Never issue refunds or change prices without "
            "explicit confirmation. Tools: admin_api, inventory_export, shipping_quotes, fetch_page, payments_tail, sql_readonly.",
}


def slots(r, w, now):
    d = w.domain
    s = {"person": pick(r, w.people).split()[0], "time": (now - timedelta(minutes=r.randrange(5, 300))).strftime("%H:%M"),
         "k": r.randrange(2, 60), "x": f"{r.uniform(0.1, 9):.2f}", "mins": r.randrange(5, 90), "ms": r.randrange(200, 3000), "c": f"{r.randrange(2, 25)}.{r.randrange(1, 9)}"}
    if d == "oncall":
        svc = pick(r, w.services)
        s.update(svc=svc, region=pick(r, w.regions), topic=pick(r, w.topics), host=pick(r, w.hosts), ns=w.ns[svc])
    elif d == "mlops":
        s.update(exp=pick(r, w.experiments), model=pick(r, w.models), cluster=pick(r, w.clusters), ds=pick(r, w.datasets))
    elif d == "legal":
        s.update(party=pick(r, w.parties))
    else:
        s.update(camp=pick(r, w.campaigns), wh=pick(r, w.warehouses), prod=pick(r, w.products), cur=w.currency)
    return s


def fmt(r, w, now, tmpl):
    return tmpl.format(**slots(r, w, now))


def typo(r, word):
    if len(word) < 4 or not word.isalpha():
        return word
    i = r.randrange(1, len(word) - 1)
    k = r.randrange(3)
    if k == 0:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if k == 1:
        return word[:i] + word[i:]  .replace(word[i], word[i] * 2, 1)
    return word[:i] + word[i + 1:]


def mangle(r, text, style):
    """Casing / typo noise for user prose.  Never applied to planted sentences."""
    if style.get("lower"):
        text = text.lower()
    if style.get("typos"):
        words = text.split(" ")
        for _ in range(max(1, len(words) // 25)):
            j = r.randrange(len(words))
            words[j] = typo(r, words[j])
        text = " ".join(words)
    return text


def user_base(r, w, now):
    """The filler parts of a user turn: opener, request, context sentences, optional distractor, optional pasted snippet."""
    d = w.domain
    style = {"lower": chance(r, 0.35), "typos": chance(r, 0.3), "runon": chance(r, 0.25)}
    req = fmt(r, w, now, pick(r, REQUESTS[d]))
    ctx = [fmt(r, w, now, t) for t in r.sample(CONTEXT_BITS[d], r.randrange(0, 3))]
    dis = pick(r, OFFICE_DISTRACTORS) if chance(r, 0.3) else None
    paste = None
    if chance(r, 0.12):
        paste = "\n".join(f"{iso(back(now, r, 3600))} {pick(r, ['WARN', 'ERROR', 'INFO'])} {pick(r, LOG_MSGS)} id={hx(r, 8)}"
                          for _ in range(r.randrange(2, 7)))
    return {"opener": pick(r, OPENERS), "req": req, "ctx": ctx, "dis": dis, "paste": paste, "style": style}


def join_sents(r, sents, runon):
    sents = [s for s in sents if s]
    if not sents:
        return ""
    if runon:
        return pick(r, [" and ", ", ", " — ", "; "]).join(sents)
    return ". ".join(s[0].upper() + s[1:] if s and s[0].islower() and chance(r, 0.5) else s for s in sents) + pick(r, [".", "", "?", " thx"])


def render_user(r, base, fact_sentence=None, place=None, extra_block=None, email_from=None):
    """Assemble a user message.  The planted sentence is inserted verbatim (never mangled)."""
    st = base["style"]
    sents = [base["req"]] + base["ctx"] + ([base["dis"]] if base["dis"] else [])
    r.shuffle(sents) if len(sents) > 2 and chance(r, 0.4) else None
    body = mangle(r, join_sents(r, sents, st["runon"]), st)
    opener = mangle(r, base["opener"], st)
    head = (opener + (" " if opener[-1] in ".:!," else pick(r, [" ", ", ", " — ", "\n"]))) if opener else ""
    paste = f"\n\n```\n{base['paste']}\n```" if base["paste"] else ""
    if not fact_sentence:
        return head + body + paste
    fs = fact_sentence
    if place == "mid":
        parts = body.split(". ")
        k = r.randrange(len(parts) + 1)
        parts.insert(k, fs)
        return head + ". ".join(parts) + paste
    if place == "bullets":
        items = [body, fs]
        r.shuffle(items)
        bullet = pick(r, ["- ", "* ", "• "])
        return head.rstrip() + ("\n" if head else "") + pick(r, ["few things:", "couple of points", "context:", "notes"]) + "\n" + "\n".join(bullet + i for i in items) + paste
    if place == "numbered":
        items = [body, fs, mangle(r, pick(r, ["and ping me when done", "no rush on the rest", "the usual caveats apply"]), st)]
        r.shuffle(items)
        return head.rstrip() + ("\n" if head else "") + "\n".join(f"{i + 1}. {x}" for i, x in enumerate(items)) + paste
    if place == "ps":
        return head + body + paste + "\n\n" + pick(r, ["PS: ", "p.s. ", "PS — ", "ps "]) + fs
    if place == "paren":
        return head + body + f" ({pick(r, ['fwiw', 'btw', 'oh and', 'side note:'])} {fs})" + paste
    if place == "email":
        who, addr, subj = email_from
        quoted = "\n".join("> " + ln for ln in [f"From: {who} <{addr}>", f"Subject: {subj}", "", f"Hi, quick note before the call: {fs}.",
                                                 "Shout if that's a problem.", "", who.split()[0]])
        return head + body + "\n\n" + pick(r, ["forwarding this from", "fyi, see below from", "context from"]) + f" {who.split()[0]}:\n\n" + quoted
    if place == "block":   # planted sentence right after a pasted block (log / trace / table / json)
        return head + body + "\n\n" + extra_block + "\n\n" + fs
    if place == "table":
        return head + body + "\n\n" + extra_block
    return head + body + " " + fs


def assistant_commentary(r, w, now, tool):
    d = w.domain
    if chance(r, 0.35):
        return None
    return fmt(r, w, now, pick(r, COMMENTARY[d]))


def assistant_final(r, w, now):
    d = w.domain
    k = r.randrange(2, 6)
    finds = [fmt(r, w, now, t) for t in r.sample(FINDINGS[d], k)]
    shape = r.randrange(4)
    if shape == 0:
        txt = "Here's what I found:\n\n" + "\n".join(f"- {f[0].upper() + f[1:]}" for f in finds)
    elif shape == 1:
        txt = "**Summary**\n\n" + ". ".join(f[0].upper() + f[1:] for f in finds) + "."
    elif shape == 2:
        txt = "### Findings\n\n" + "\n".join(f"{i + 1}. {f}" for i, f in enumerate(finds)) + "\n\n### Next\n\n- " + pick(r, [
            "confirm with a second window", "wait for the next eval", "check with the owner", "re-run after the fix"])
    else:
        txt = " ".join(f[0].upper() + f[1:] + "." for f in finds)
    c = pick(r, CLOSERS)
    return txt + ("\n\n" + c if c else "")


REFS = {
    "identifier": ["Found it — the {label} is in that output (I won't paste it again).",
                   "That listing has what we need: the {label}. Noting it and moving on.",
                   "OK, the {label} is the odd one out in the output above.",
                   "Good, that gives us the {label} (see the result above)."],
    "path": ["The {label} is in that output.", "That shows the {label} — it's the entry that stands out above.",
             "Got the {label} from that result; I'll refer back to it."],
    "error": ["That call failed — see the {label} above. I'll work around it.", "Errored out ({label} in the output above); the code is the useful bit.",
              "That didn't work; the response is a {label}. Retrying differently.", "Failure — the {label} above explains why. Trying another route."],
}


# --------------------------------------------------------------------------
# thread assembly
# --------------------------------------------------------------------------

ROLE_MIX = {"constraint": [(1, "user")], "preference": [(1, "user")],
            "identifier": [(3, "user"), (2, "assistant"), (5, "tool")],
            "path": [(3, "user"), (2, "assistant"), (5, "tool")],
            "error": [(3, "user"), (7, "tool")],
            "decision": [(1, "user"), (1, "assistant")]}
ERR_LABEL = {"problem": "problem+json response", "grpc": "gRPC status", "java": "Java stack trace", "go": "Go error",
             "python": "Python traceback", "node": "Node.js error", "rust": "Rust error chain", "exit": "non-zero exit"}
USER_ERR_INTRO = ["this is what I get when I run it locally:", "CI is red with this:", "the deploy bot posted this in the channel:",
                  "got this back from the vendor API, no idea what it means:", "{p} pasted this from their machine:",
                  "seeing this on every retry:"]
USER_ERR_STYLES = {"oncall": ["go", "grpc", "exit", "problem"], "mlops": ["python", "grpc", "exit"],
                   "legal": ["problem", "java", "node"], "shop": ["rust", "node", "problem"]}


def message_text(m):
    """Content plus tool-call names and arguments (what a prompt carries)."""
    parts = []
    c = m.get("content")
    if isinstance(c, str):
        parts.append(c)
    elif isinstance(c, list):
        parts += [p.get("text", "") for p in c if isinstance(p, dict)]
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        parts.append(fn.get("name", ""))
        parts.append(fn.get("arguments", "") if isinstance(fn.get("arguments"), str) else json.dumps(fn.get("arguments")))
    return "\n".join(parts)


def _json_strings(v, out):
    if isinstance(v, str):
        out.append(v)
    elif isinstance(v, dict):
        for x in v.values():
            _json_strings(x, out)
    elif isinstance(v, list):
        for x in v:
            _json_strings(x, out)


def search_text(m):
    """A superset of what the scorer sees for one message: text, tool-call ids, decoded JSON."""
    parts = [message_text(m), m.get("tool_call_id", "")]
    blobs = [m.get("content")] + [(tc.get("function") or {}).get("arguments") for tc in m.get("tool_calls") or []]
    parts += [tc.get("id", "") for tc in m.get("tool_calls") or []]
    for b in blobs:
        if isinstance(b, str) and b[:1] in "{[":
            try:
                _json_strings(json.loads(b), parts)
            except ValueError:
                pass
    return "\n".join(p for p in parts if p)


class Fact:
    __slots__ = ("idx", "kind", "role", "target", "sub", "place", "tool", "style", "tgt_tokens", "host", "call_host",
                 "attempt", "checks", "text", "label", "base", "now", "fid")


class Thread:
    def __init__(self, seed, domain, n):
        if domain not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r}; choose from {DOMAINS}")
        if n < 20:
            raise ValueError("n_messages must be at least 20")
        self.seed, self.domain, self.n = seed, domain, n
        self.key = f"{seed}|{domain}|{n}"
        self.r = random.Random(f"alt-main|{self.key}")
        self.w = World(seed, domain, n)
        self.tools = TOOLSETS[domain]
        self.msgs = []
        self.raw = {}          # msg idx -> content with @@REF<k>@@ placeholders
        self.facts = self.plan_facts()
        self.rerolls = 0
        self.dropped = 0

    # ---- planning ---------------------------------------------------------
    def plan_facts(self):
        n = self.n
        nf = max(6, round(n * FACTS_PER_MESSAGE))
        pr = random.Random(f"alt-plan|{self.key}")
        kinds = []
        while len(kinds) < nf:
            cyc = list(KINDS)
            pr.shuffle(cyc)
            kinds += cyc
        kinds = kinds[:nf]
        third = n / 3
        slack = max(8, n // 20)
        facts = []
        used_pref, used_sub = {}, []
        # pool-limited subtypes must not be planted more often than they have distinct values
        cap = {"region": len(FORUMS if self.domain == "legal" else FACT_REGIONS), "ban": len(BANNED[self.domain])}
        used_cap = {}
        for i, k in enumerate(kinds):
            f = Fact()
            f.idx, f.kind = i, k
            f.fid = f"alt-{self.domain}-{self.seed}-{n}-{i:03d}"
            b = i % 3
            lo = int(b * third) + 2
            hi = max(lo + 1, int((b + 1) * third) - slack)
            f.target = pr.randrange(lo, hi)
            f.role = wpick(pr, ROLE_MIX[k])
            f.sub = f.place = f.tool = f.style = None
            f.tgt_tokens = int(min(3000, max(500, pr.lognormvariate(math.log(1100), 0.5))))
            if k == "constraint":
                ok = [s for s in CONSTRAINT_SUBS if used_cap.get(s, 0) < cap.get(s, 10 ** 9)]
                opts = [s for s in ok if s not in used_sub] or ok
                f.sub = pick(pr, opts)
                used_cap[f.sub] = used_cap.get(f.sub, 0) + 1
                used_sub = (used_sub + [f.sub])[-3:]
                f.place = pick(pr, ["mid", "bullets", "numbered", "ps", "paren", "email", "email", "block", "mid"])
            elif k == "preference":
                least = min(used_pref.get(p[0], 0) for p in PREFS if used_pref.get(p[0], 0) < len(p[1]))
                cats = [p[0] for p in PREFS if used_pref.get(p[0], 0) == least and least < len(p[1])]
                f.sub = pick(pr, cats)
                used_pref[f.sub] = used_pref.get(f.sub, 0) + 1
                f.place = pick(pr, ["mid", "bullets", "ps", "paren", "mid", "numbered", "end"])
            elif k == "decision":
                f.place = pick(pr, ["mid", "end", "ps", "email", "bullets"]) if f.role == "user" else pick(pr, ["start", "end", "bullet"])
            elif k == "error":
                if f.role == "tool":
                    cands = [t for t, spec in self.tools.items() if spec[3]]
                    f.tool = pick(pr, cands)
                    f.style = pick(pr, self.tools[f.tool][3])
                else:
                    f.style = pick(pr, USER_ERR_STYLES[self.domain])
            else:  # identifier / path
                if f.role == "tool":
                    cands = [t for t, spec in self.tools.items() if k in spec[2]]
                    f.tool = pick(pr, cands)
                elif f.role == "user":
                    f.place = pick(pr, ["mid", "paren", "ps", "bullets", "json" if k == "identifier" else "trace", "end"])
                else:
                    f.place = pick(pr, ["start", "end", "bullet"])
            f.host = f.call_host = None
            f.attempt = 0
            f.checks, f.text, f.label = [], "", ""
            facts.append(f)
        facts.sort(key=lambda f: (f.target, f.idx))
        return facts

    def frng(self, f):
        return random.Random(f"alt-fact|{self.key}|{f.idx}|{f.attempt}")

    def taken(self, f):
        return {c for g in self.facts if g is not f for c in g.checks}

    def due(self, role):
        i = len(self.msgs)
        for f in self.facts:
            if f.host is None and f.role == role and f.target <= i:
                return f
        return None

    def overdue_user(self):
        i = len(self.msgs)
        return any(f.host is None and f.role == "user" and f.target <= i for f in self.facts)

    # ---- fact builders (pure functions of the fact's own rng) ------------
    def build(self, f):
        fr = self.frng(f)
        taken = self.taken(f)
        w, d = self.w, self.domain
        if f.role == "tool":
            fn = self.tools[f.tool][0]
            if f.kind == "error":
                args, partial, _ = fn(fr, w, f.now, 300)
                a, b, code = err_spec(fr, d, taken)
                text, checks = fmt_error(fr, f.style, d, w, a, b, code)
                if f.style == "problem":
                    org = getattr(w, "org", None) or getattr(w, "slug", None) or getattr(w, "tenant", "acme")
                    echo = "\n".join("> " + ln for ln in json.dumps(args, indent=2, ensure_ascii=False).splitlines())
                    text = (f"> {pick(fr, ['POST', 'PUT', 'PATCH'])} /v{fr.randrange(1, 4)}/{f.tool.replace('_', '-')} HTTP/1.1\n"
                            f"> host: api.{org}.example\n> authorization: Bearer ****redacted****\n> content-type: application/json\n"
                            f"> idempotency-key: {uuid4(fr)}\n> traceparent: 00-{hx(fr, 32)}-{hx(fr, 16)}-01\n>\n{echo}\n\n" + text)
                elif est_tokens(text) < 330 or (f.style in ("exit", "python", "grpc") and chance(fr, 0.6)):
                    lines, keep = partial.splitlines(), []
                    need = max(120, 360 - est_tokens(text))
                    while lines and est_tokens("\n".join(keep)) < need:
                        keep.append(lines.pop(0))
                    text = "\n".join(keep) + "\n" + text
                content, label = text, ERR_LABEL[f.style]
                ftext = f"{f.tool} failed: {checks[0]} ({checks[1]})"
            else:
                tgt = f.tgt_tokens
                args, content, planted = fn(fr, w, f.now, tgt, plant=f.kind)
                while est_tokens(content) > 3700 and tgt > 300:
                    tgt = int(tgt * 0.7)
                    args, content, planted = fn(fr, w, f.now, tgt, plant=f.kind)
                checks, label, ftext = planted["checks"], planted["label"], planted["text"]
            call = self.msgs[f.call_host]["tool_calls"][0]
            call["function"]["arguments"] = json.dumps(args, ensure_ascii=False)
            self.msgs[f.host]["content"] = content
            f.checks, f.label, f.text = checks, label, ftext
            return
        # user / assistant prose
        if f.kind == "constraint":
            spec = fact_constraint(fr, w, d, taken, f.sub)
        elif f.kind == "preference":
            spec = fact_preference(fr, w, d, taken, f.sub)
        elif f.kind == "decision":
            spec = fact_decision(fr, w, d, taken, f.role)
        elif f.kind == "error":
            a, b, code = err_spec(fr, d, taken)
            text, checks = fmt_error(fr, f.style, d, w, a, b, code, frames=fr.randrange(4, 14))
            intro = pick(fr, USER_ERR_INTRO).format(p=pick(fr, w.people).split()[0])
            spec = {"checks": checks, "sentence": f"{intro}\n\n```\n{text}\n```\n\n{pick(fr, ['any idea?', 'what does that even mean', 'help', 'is this related?', ''])}",
                    "text": f"Error seen by the user: {checks[0]} ({checks[1]})"}
            f.place = "append"
        elif f.kind == "identifier":
            v, label = ident_value(fr, w, d)
            if f.role == "user" and f.place == "json":
                key = pick(fr, ["xref", "ext_ref", "hndl", "k", "origin_id", "rid", "corr"])
                blob = {"ts": iso(f.now), "src": pick(fr, ["ticket", "webhook", "export"]), key: v,
                        "related": [hx(fr, 12) for _ in range(fr.randrange(1, 4))], "note": pick(fr, ["see thread", "", "auto"])}
                spec = {"checks": [v], "sentence": f"payload from the ticket — the {label} is in there:\n\n```json\n{json.dumps(blob, indent=2)}\n```",
                        "text": f"{label}: {v}"}
            else:
                t = pick(fr, ID_USER_T if f.role == "user" else ID_ASSIST_T)
                spec = {"checks": [v], "sentence": t.format(v=v, label=label), "text": f"{label}: {v}"}
        else:  # path
            v, label = path_value(fr, w, d)
            if f.role == "user" and f.place == "trace" and not v.startswith(("http", "s3:", "gs:", "\\\\", "//")):
                frames = [f'  File "/usr/lib/python3.11/{pick(fr, ["asyncio/runners", "runpy", "concurrent/futures/thread"])}.py", line {fr.randrange(40, 300)}, in {pick(fr, ["run", "_run_code", "result"])}'
                          for _ in range(fr.randrange(2, 5))]
                frames.insert(fr.randrange(1, len(frames) + 1), f'  File "{v}", line {fr.randrange(10, 400)}, in {pick(fr, ["apply", "flush", "load", "render"])}')
                spec = {"checks": [v], "sentence": f"stack trace from my laptop, the frame in our code is the one that matters:\n\n```\nTraceback (most recent call last):\n"
                                                   + "\n".join(frames) + f"\n{pick(fr, ['KeyError', 'ValueError', 'RuntimeError'])}: {pick(fr, ['missing key', 'bad value', 'unexpected state'])}\n```",
                        "text": f"{label}: {v}"}
                f.place = "append"
            else:
                if f.place == "trace":
                    f.place = "mid"
                t = pick(fr, PATH_USER_T if f.role == "user" else PATH_ASSIST_T)
                spec = {"checks": [v], "sentence": t.format(v=v, label=label), "text": f"{label}: {v}"}
        f.checks, f.text = spec["checks"], spec["text"]
        f.label = f.kind
        s = spec["sentence"]
        if f.role == "user":
            base = f.base
            if f.place == "append":
                content = render_user(fr, base) + "\n\n" + s
            elif f.place == "email":
                who = pick(fr, w.people[1:])
                host = {"oncall": lambda: f"{w.org}.example", "mlops": lambda: f"{w.org}.ai", "legal": lambda: f"mail.{w.tenant}.example",
                        "shop": lambda: f"{w.slug}.example"}[d]()
                subj = pick(fr, ["Re: this week", "FW: priorities", "quick one", "Re: plan", "before Thursday"])
                content = render_user(fr, base, s, "email", email_from=(who, email_of(who, host), subj))
            elif f.place == "block":
                log = "\n".join(f"{iso(back(f.now, fr, 3600))} {pick(fr, ['WARN', 'INFO'])} {pick(fr, LOG_MSGS)} req={hx(fr, 10)}" for _ in range(fr.randrange(3, 9)))
                content = render_user(fr, base, s, "block", extra_block=f"```\n{log}\n```")
            elif f.place == "end":
                content = render_user(fr, base) + pick(fr, [" ", "\n\n", ". also, ", " — "]) + s
            else:
                content = render_user(fr, base, s, f.place)
            self.msgs[f.host]["content"] = content
        else:
            base = f.base or ""
            s = s[0].upper() + s[1:]
            if f.place == "start" or not base:
                txt = s + ("\n\n" + base if base else "")
            elif f.place == "bullet":
                txt = base + "\n\n- " + s
            else:
                txt = base + "\n\n" + s
            self.set_raw(f.host, txt)

    def set_raw(self, i, txt):
        if i in self.raw:
            self.raw[i] = txt
        else:
            self.msgs[i]["content"] = txt

    def resolve_refs(self):
        for i, tmpl in self.raw.items():
            def sub(m):
                g = self.facts_by_idx[int(m.group(1))]
                return self.ref_tmpl[g.idx].format(label=g.label)
            self.msgs[i]["content"] = re.sub(r"@@REF(\d+)@@", sub, tmpl)

    # ---- emission ----------------------------------------------------------
    def call_id(self):
        return "call_" + rs(self.r, string.ascii_letters + DIG, 24)

    def tool_target(self):
        return int(min(3300, max(230, self.r.lognormvariate(math.log(720), 0.8))))

    def emit_user(self):
        r, w = self.r, self.w
        now = w.now(len(self.msgs), self.n)
        base = user_base(r, w, now)
        f = self.due("user")
        self.msgs.append({"role": "user", "content": render_user(r, base)})
        if f:
            f.host, f.base, f.now = len(self.msgs) - 1, base, now
            self.build(f)

    def emit_assistant(self, content, tool_calls=None, ref=None):
        """content may be None; ref = a tool-hosted fact whose result this message refers to."""
        m = {"role": "assistant", "content": content}
        if tool_calls:
            m["tool_calls"] = tool_calls
        self.msgs.append(m)
        i = len(self.msgs) - 1
        if ref is not None:
            ph = f"@@REF{ref.idx}@@"
            self.ref_tmpl[ref.idx] = pick(self.r, REFS[ref.kind if ref.kind in REFS else "identifier"])
            self.raw[i] = ph + ("\n\n" + content if content else "")
            m["content"] = self.raw[i]
        f = self.due("assistant")
        if f:
            f.host, f.now = i, self.w.now(i, self.n)
            f.base = content or ""
            if ref is not None:
                f.base = f"@@REF{ref.idx}@@" + ("\n\n" + content if content else "")
            self.build(f)
        return i

    def tool_step(self, k, ref, retry):
        """One assistant message with k tool calls and their k results. Returns (fact_for_ref, retry)."""
        r, w = self.r, self.w
        now = w.now(len(self.msgs), self.n)
        f = self.due("tool")
        if f is not None:
            cid = self.call_id()
            call = {"id": cid, "type": "function", "function": {"name": f.tool, "arguments": "{}"}}
            com = assistant_commentary(r, w, now, f.tool)
            ci = self.emit_assistant(com, [call], ref)
            self.msgs.append({"role": "tool", "tool_call_id": cid, "content": ""})
            f.call_host, f.host, f.now = ci, len(self.msgs) - 1, now
            self.build(f)
            return f, None
        names = list(self.tools)
        weights = [self.tools[t][1] for t in names]
        calls, results, new_retry = [], [], None
        for j in range(k):
            if retry is not None and j == 0:
                name, args = retry
            else:
                name, args = r.choices(names, weights)[0], None
            tgt = self.tool_target()
            a2, content, _ = self.tools[name][0](r, w, now, tgt)
            for _ in range(3):      # keep every result inside 200..4000 tokens
                e = est_tokens(content)
                if 215 <= e <= 3800:
                    break
                tgt = int(tgt * (1.6 if e < 215 else 0.6))
                a2, content, _ = self.tools[name][0](r, w, now, tgt)
            if args is None:
                args = a2
            if chance(r, 0.03):
                content = transient_error(r, w, name)
                new_retry = (name, args)
            cid = self.call_id()
            calls.append({"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
            results.append({"role": "tool", "tool_call_id": cid, "content": content})
        com = assistant_commentary(r, w, now, calls[0]["function"]["name"])
        if retry is not None:
            com = "Retrying the call that failed upstream." + (" " + com if com else "")
        self.emit_assistant(com, calls, ref)
        self.msgs.extend(results)
        return None, new_retry

    def run(self):
        r, w, n = self.r, self.w, self.n
        self.ref_tmpl = {}
        self.facts_by_idx = {f.idx: f for f in self.facts}
        self.msgs.append({"role": "system", "content": SYSTEM_PROMPTS[self.domain].format(
            org=getattr(w, "org", ""), firm=getattr(w, "firm", ""), store=getattr(w, "store", ""))})
        max_steps = max(2, min(9, n // 55))
        while len(self.msgs) < n:
            self.emit_user()
            ref, retry = None, None
            steps = r.randrange(1, max_steps + 1)
            if chance(r, 0.08) and self.due("tool") is None:
                steps = 0        # plain chat turn
            for _ in range(steps):
                R = n - len(self.msgs)
                if R < 3 or (self.overdue_user() and self.due("tool") is None):
                    break
                k = wpick(r, [(80, 1), (14, 2), (6, 3)])
                k = min(k, R - 2)
                ref, retry = self.tool_step(k, ref, retry)
            R = n - len(self.msgs)
            if R >= 2:
                now = w.now(len(self.msgs), n)
                self.emit_assistant(assistant_final(r, w, now), None, ref)
                ref = None
            elif ref is not None:
                # no room for a reply that refers to the result; that's fine (thread ends mid-task)
                self.ref_tmpl.pop(ref.idx, None)
        for f in self.facts:
            if f.host is None:
                self.dropped += 1
        self.facts = [f for f in self.facts if f.host is not None]
        self.resolve_refs()

    # ---- verification ------------------------------------------------------
    def collisions(self):
        texts = [search_text(m) for m in self.msgs]
        starts, pos = [], 0
        for t in texts:
            starts.append(pos)
            pos += len(t) + 1
        big = "\x00".join(texts)
        bad = []
        for f in self.facts:
            for c in f.checks:
                if not c:
                    raise AssertionError(f"empty check for {f.fid}")
                hits = set()
                j = big.find(c)
                while j != -1:
                    hits.add(bisect.bisect_right(starts, j) - 1)
                    j = big.find(c, j + 1)
                if f.host not in hits:
                    raise AssertionError(f"{f.fid}: check {c!r} missing from its own message {f.host}")
                if hits != {f.host}:
                    bad.append(f)
                    break
        return bad

    def verify(self, rounds=40):
        for _ in range(rounds):
            bad = self.collisions()
            if not bad:
                return
            for f in bad:
                f.attempt += 1
                self.rerolls += 1
                self.build(f)
            self.resolve_refs()
        raise AssertionError(f"could not make check strings unique after {rounds} rounds: "
                             + ", ".join(f"{f.fid} {f.kind} {f.checks}" for f in self.collisions()))

    def result(self):
        n = len(self.msgs)
        facts = []
        for f in sorted(self.facts, key=lambda f: f.host):
            bucket = BUCKETS[min(2, 3 * f.host // n)]
            facts.append({"id": f.fid, "kind": f.kind, "position": f.host, "bucket": bucket, "role": self.msgs[f.host]["role"],
                          "check": list(f.checks), "text": f.text, "label": f.label, "attempt": f.attempt,
                          **({"tool": f.tool} if f.tool else {}), **({"style": f.style} if f.style else {})})
        by_kind = {k: sum(1 for x in facts if x["kind"] == k) for k in KINDS}
        by_bucket = {b: sum(1 for x in facts if x["bucket"] == b) for b in BUCKETS}
        by_role = {}
        for x in facts:
            by_role[x["role"]] = by_role.get(x["role"], 0) + 1
        tools_used = {}
        for m in self.msgs:
            for tc in m.get("tool_calls") or []:
                tools_used[tc["function"]["name"]] = tools_used.get(tc["function"]["name"], 0) + 1
        meta = {"generator": "alt", "generator_version": GEN_VERSION, "seed": self.seed, "domain": self.domain,
                "n_messages": n, "facts_by_kind": by_kind, "facts_by_bucket": by_bucket, "facts_by_role": by_role,
                "rerolls": self.rerolls, "facts_dropped": self.dropped, "tool_calls": sum(tools_used.values()),
                "tools_used": tools_used,
                "est_tokens": sum(est_tokens(message_text(m)) for m in self.msgs)}
        return {"messages": self.msgs, "facts": facts, "meta": meta}


def generate(seed, domain, n_messages):
    t = Thread(seed, domain, n_messages)
    t.run()
    t.verify()
    out = t.result()
    assert len(out["messages"]) == n_messages, (len(out["messages"]), n_messages)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="held-out thread generator (alt)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--domain", default="oncall", choices=DOMAINS)
    ap.add_argument("--messages", type=int, default=480)
    ap.add_argument("--out", default="-")
    a = ap.parse_args(argv)
    th = generate(a.seed, a.domain, a.messages)
    if a.out == "-":
        json.dump(th, sys.stdout, ensure_ascii=False)
        return
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(th, fh, ensure_ascii=False)
    base = a.out[:-5] if a.out.endswith(".json") else a.out
    with open(base + ".messages.json", "w", encoding="utf-8") as fh:
        json.dump(th["messages"], fh, ensure_ascii=False)
    m = th["meta"]
    print(f"{a.out}: {m['n_messages']} messages, {sum(m['facts_by_kind'].values())} facts {m['facts_by_kind']}, "
          f"rerolls {m['rerolls']}, ~{m['est_tokens']:,} tokens (estimate)", file=sys.stderr)


if __name__ == "__main__":
    main()
