/* vocab_gen: synthetic llama (SentencePiece BPE) vocabulary. Pieces are added in merge order:
 * single characters first, then words, suffixes, letter pairs and finally deterministic filler.
 * Adding a piece first adds its prefix chain (the piece minus its last character) and its last
 * character, which keeps every piece reachable by merging two earlier pieces. */
#include "vocab_gen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define WORD_START "\xe2\x96\x81" /* U+2581, SentencePiece's space marker */
#define MAX_PIECE 32

static const char *const k_words[] = {
    "the",     "of",       "and",      "a",        "to",      "in",       "is",       "you",
    "that",    "it",       "he",       "was",      "for",     "on",       "are",      "as",
    "with",    "his",      "they",     "I",        "at",      "be",       "this",     "have",
    "from",    "or",       "one",      "had",      "by",      "word",     "but",      "not",
    "what",    "all",      "were",     "we",       "when",    "your",     "can",      "said",
    "there",   "use",      "an",       "each",     "which",   "she",      "do",       "how",
    "their",   "if",       "will",     "up",       "other",   "about",    "out",      "many",
    "then",    "them",     "these",    "so",       "some",    "her",      "would",    "make",
    "like",    "him",      "into",     "time",     "has",     "look",     "two",      "more",
    "write",   "go",       "see",      "number",   "no",      "way",      "could",    "people",
    "my",      "than",     "first",    "water",    "been",    "call",     "who",      "oil",
    "its",     "now",      "find",     "long",     "down",    "day",      "did",      "get",
    "come",    "made",     "may",      "part",     "Once",    "upon",     "story",    "little",
    "girl",    "boy",      "happy",    "dog",      "cat",     "tree",     "house",    "mother",
    "father",  "friend",   "play",     "saw",      "big",     "small",    "very",     "went",
    "over",    "new",      "sound",    "take",     "only",    "work",     "know",     "place",
    "year",    "live",     "me",       "back",     "give",    "most",     "very",     "after",
    "thing",   "our",      "just",     "name",     "good",    "sentence", "man",      "think",
    "say",     "great",    "where",    "help",     "through", "much",     "before",   "line",
    "right",   "too",      "mean",     "old",      "any",     "same",     "tell",     "follow",
    "came",    "want",     "show",     "also",     "around",  "form",     "three",    "small",
    "set",     "put",      "end",      "does",     "another", "well",     "large",    "must",
    "even",    "such",     "because",  "turn",     "here",    "why",      "ask",      "men",
    "change",  "light",    "kind",     "off",      "need",    "home",     "us",       "move",
    "try",     "again",    "animal",   "point",    "world",   "near",     "build",    "self",
    "earth",   "head",     "stand",    "own",      "page",    "should",   "country",  "found",
    "answer",  "school",   "grow",     "study",    "still",   "learn",    "plant",    "cover",
    "food",    "sun",      "four",     "between",  "state",   "keep",     "eye",      "never",
    "last",    "let",      "thought",  "city",     "cross",   "farm",     "hard",     "start",
    "might",   "draw",     "left",     "late",     "run",     "while",    "press",    "close",
    "night",   "real",     "life",     "few",      "north",   "open",     "seem",     "together",
    "next",    "white",    "children", "begin",    "got",     "walk",     "example",  "ease",
    "paper",   "group",    "always",   "music",    "those",   "both",     "mark",     "often",
    "letter",  "until",    "mile",     "river",    "car",     "feet",     "care",     "second",
    "book",    "carry",    "took",     "science",  "eat",     "room",     "began",    "idea",
    "fish",    "mountain", "stop",     "once",     "base",    "hear",     "horse",    "cut",
    "sure",    "watch",    "color",    "face",     "wood",    "main",     "enough",   "plain",
    "usually", "young",    "ready",    "above",    "ever",    "red",      "list",     "though",
    "feel",    "talk",     "bird",     "soon",     "body",    "family",   "leave",    "song",
    "door",    "black",    "short",    "class",    "wind",    "question", "happen",   "complete",
    "ship",    "area",     "half",     "rock",     "order",   "fire",     "south",    "problem",
    "piece",   "told",     "knew",     "pass",     "since",   "top",      "whole",    "king",
    "space",   "heard",    "best",     "hour",     "better",  "true",     "during",   "hundred",
    "five",    "remember", "step",     "early",    "hold",    "west",     "ground",   "interest",
    "reach",   "fast",     "sing",     "listen",   "six",     "table",    "travel",   "less",
    "morning", "ten",      "simple",   "several",  "toward",  "war",      "lay",      "against",
    "pattern", "slow",     "center",   "love",     "person",  "money",    "serve",    "appear",
    "road",    "map",      "rain",     "rule",     "pull",    "cold",     "notice",   "voice",
    "power",   "town",     "fine",     "certain",  "fly",     "fall",     "lead",     "cry",
    "dark",    "machine",  "note",     "wait",     "plan",    "figure",   "star",     "box",
    "noun",    "field",    "rest",     "able",     "pound",   "done",     "beauty",   "drive",
    "stood",   "contain",  "front",    "teach",    "week",    "final",    "gave",     "green",
    "oh",      "quick",    "develop",  "ocean",    "warm",    "free",     "minute",   "strong",
    "special", "mind",     "behind",   "clear",    "tail",    "produce",  "fact",     "street",
    "inch",    "nothing",  "course",   "stay",     "wheel",   "full",     "force",    "blue",
    "object",  "decide",   "surface",  "deep",     "moon",    "island",   "foot",     "system",
    "busy",    "test",     "record",   "boat",     "common",  "gold",     "possible", "plane",
    "dry",     "wonder",   "laugh",    "thousand", "ago",     "ran",      "check",    "game",
    "shape",   "yes",      "hot",      "miss",     "brought", "heat",     "snow",     "bed",
    "bring",   "sit",      "perhaps",  "fill",     "east",    "weight",   "language", "among"};

static const char *const k_suffixes[] = {"ing",  "ed",   "er",   "es",  "ly",   "tion",  "ment",
                                         "ness", "able", "est",  "al",  "ous",  "ive",   "ful",
                                         "less", "ity",  "ers",  "ies", "ting", "ation", "ence",
                                         "ance", "ship", "ward", "ism"};

/* Letters repeated roughly by English frequency, so filler pieces look plausible. */
static const char k_letter_pool[] = "eeeeeeeeeeeetttttttttaaaaaaaaooooooooiiiiiiinnnnnnn"
                                    "ssssssshhhhhhrrrrrrddddlllluuucccmmffwwyyppggbvkjxqz";
static const char k_punct[] = ".,!?'\"-:;()/&%$#@*+=<>[]_`~^{}|\\";

typedef struct {
    vocab_gen *v;
    uint32_t count, n_normal;
    char **slots; /* hash set of pieces already added */
    uint32_t cap;
} builder;

static uint32_t hash_str(const char *s) {
    return sol_fnv32(SOL_FNV32_INIT, s, strlen(s));
}

static char **slot_of(builder *b, const char *s) {
    uint32_t i = hash_str(s) & (b->cap - 1);
    while (b->slots[i] && strcmp(b->slots[i], s) != 0)
        i = (i + 1) & (b->cap - 1);
    return &b->slots[i];
}

/* Appends an entry; returns -ENOMEM, 1 when the vocab is full or the piece exists, else 0. */
static int push(builder *b, const char *piece, float score, vocab_tok_type type) {
    if (b->count == b->v->n) return 1;
    char **slot = slot_of(b, piece);
    if (*slot) return 1;
    char *dup = strdup(piece);
    if (!dup) return -ENOMEM;
    *slot = dup;
    b->v->pieces[b->count] = dup;
    b->v->scores[b->count] = score;
    b->v->types[b->count] = type;
    b->count++;
    return 0;
}

static int add_normal(builder *b, const char *piece) {
    int rc = push(b, piece, -(float)b->n_normal, VOCAB_TOK_NORMAL);
    if (rc == 0) b->n_normal++;
    return rc < 0 ? rc : 0;
}

/* Adds the prefix chain and the last character before the piece itself. */
static int add_chain(builder *b, const char *piece) {
    size_t len = strlen(piece);
    if (len == 0 || len >= MAX_PIECE) return 0;
    size_t last = len - 1;
    while (last > 0 && ((uint8_t)piece[last] & 0xc0) == 0x80)
        last--; /* UTF-8 continuation */
    if (last > 0) {
        char prefix[MAX_PIECE];
        memcpy(prefix, piece, last);
        prefix[last] = '\0';
        int rc = add_chain(b, prefix);
        if (!rc) rc = add_normal(b, piece + last);
        if (rc) return rc;
    }
    return add_normal(b, piece);
}

static int add_word(builder *b, const char *word, int word_start) {
    char buf[MAX_PIECE];
    snprintf(buf, sizeof buf, "%s%s", word_start ? WORD_START : "", word);
    return add_chain(b, buf);
}

static int add_specials_and_bytes(builder *b) {
    int rc = push(b, "<unk>", 0.0f, VOCAB_TOK_UNKNOWN);
    if (!rc) rc = push(b, "<s>", 0.0f, VOCAB_TOK_CONTROL);
    if (!rc) rc = push(b, "</s>", 0.0f, VOCAB_TOK_CONTROL);
    for (int i = 0; i < 256 && !rc; i++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", i);
        rc = push(b, piece, 0.0f, VOCAB_TOK_BYTE);
    }
    return rc < 0 ? rc : 0;
}

static int add_chars(builder *b, char lo, char hi, int word_start) {
    int rc = 0;
    for (char c = lo; c <= hi && !rc; c++)
        rc = add_word(b, (char[]){c, '\0'}, word_start);
    return rc;
}

static int add_lists(builder *b) {
    size_t nw = sizeof k_words / sizeof k_words[0], head = nw < 60 ? nw : 60;
    int rc = add_normal(b, WORD_START);
    if (!rc) rc = add_chars(b, 'a', 'z', 0);
    if (!rc) rc = add_chars(b, 'a', 'z', 1);
    for (size_t i = 0; i < head && !rc; i++)
        rc = add_word(b, k_words[i], 1);
    if (!rc) rc = add_chars(b, 'A', 'Z', 0);
    if (!rc) rc = add_chars(b, '0', '9', 0);
    for (const char *p = k_punct; *p && !rc; p++)
        rc = add_word(b, (char[]){*p, '\0'}, 0);
    for (size_t i = head; i < nw && !rc; i++)
        rc = add_word(b, k_words[i], 1);
    for (size_t i = 0; i < sizeof k_suffixes / sizeof k_suffixes[0] && !rc; i++)
        rc = add_word(b, k_suffixes[i], 0);
    if (!rc) rc = add_chars(b, 'A', 'Z', 1);
    for (char x = 'a'; x <= 'z' && !rc; x++)
        for (char y = 'a'; y <= 'z' && !rc; y++)
            rc = add_word(b, (char[]){x, y, '\0'}, 0);
    for (size_t i = 0; i < nw && !rc; i++)
        rc = add_word(b, k_words[i], 0);
    return rc;
}

/* Random 2-6 letter pieces until the vocab is full; counter-based so the result is fixed. */
static int add_filler(builder *b) {
    for (uint64_t k = 0; b->count < b->v->n; k++) {
        uint64_t r = sol_splitmix64(k);
        char word[8];
        int len = 2 + (int)(r % 5);
        r /= 5;
        for (int i = 0; i < len; i++, r /= 97)
            word[i] = k_letter_pool[r % (sizeof k_letter_pool - 1)];
        word[len] = '\0';
        int rc = add_word(b, word, (int)(sol_splitmix64(~k) & 1));
        if (rc) return rc;
    }
    return 0;
}

vocab_gen *vocab_gen_new(uint32_t n, sol_err *e) {
    if (n < VOCAB_GEN_MIN || n > VOCAB_GEN_MAX) {
        sol_err_set(e, -EINVAL, "vocab size %u out of range: expected %d..%d", n, VOCAB_GEN_MIN,
                    VOCAB_GEN_MAX);
        return NULL;
    }
    vocab_gen *v = calloc(1, sizeof *v);
    builder b = {.v = v};
    b.cap = 1024;
    while (b.cap < 2 * n)
        b.cap *= 2;
    b.slots = calloc(b.cap, sizeof *b.slots);
    if (v) {
        v->n = n;
        v->pieces = calloc(n, sizeof *v->pieces);
        v->scores = calloc(n, sizeof *v->scores);
        v->types = calloc(n, sizeof *v->types);
    }
    int rc = (!v || !b.slots || !v->pieces || !v->scores || !v->types) ? -ENOMEM : 0;
    if (!rc) rc = add_specials_and_bytes(&b);
    if (!rc) rc = add_lists(&b);
    if (!rc) rc = add_filler(&b);
    free(b.slots); /* the pieces themselves are owned by v */
    if (rc) {
        sol_err_set(e, rc, "vocab: out of memory building %u entries", n);
        vocab_gen_free(v);
        return NULL;
    }
    return v;
}

void vocab_gen_free(vocab_gen *v) {
    if (!v) return;
    if (v->pieces)
        for (uint32_t i = 0; i < v->n; i++)
            free(v->pieces[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    free(v);
}

int32_t vocab_gen_find(const vocab_gen *v, const char *piece) {
    for (uint32_t i = 0; i < v->n; i++)
        if (v->pieces[i] && strcmp(v->pieces[i], piece) == 0) return (int32_t)i;
    return -1;
}
