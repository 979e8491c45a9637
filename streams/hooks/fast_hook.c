/* loopwarden-hook without an interpreter: what `loopwarden hooks install` writes for
 * each hook event by default. It reads the hook's JSON on stdin, posts it to the sidecar
 * (`loopwarden hooks serve`), prints the answer and exits, as `loopwarden-hook`
 * (streams/hooks/hook.py) does, with the same bytes on stdout and stderr and the same
 * exit code for the same input, command line and environment. It is built on the user's
 * machine by streams/hooks/fast.py, which writes lw_config.h beside it: the runtimes'
 * hook events and their fail-closed answers, read from streams/hooks/runtimes.py.
 *
 * hook.py's messages quote Python's own texts (OSError's "[Errno N] strerror", int()'s
 * errors, str.strip(), repr(), the UTF-8 codec's replacements); this file writes the same
 * for what reaches it. A command line or environment whose handling would need more of
 * Python than that (an option hook.py refuses, a number not written plainly, a URL that
 * is not printable ASCII, text that is not valid UTF-8, a locale or PYTHON* variable that
 * changes Python's encodings) is handed, untouched and before stdin is read, to the
 * Python hook by exec: the answer is then Python's own. tests/unit/test_hooks_fast.py
 * compares both hooks' bytes. */

#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

struct endpoint {
    const char *runtime, *event;
    const char *deny_head, *deny_tail; /* fail-closed answer around the cause; "" when none */
};

#include "lw_config.h"

/* kept in the binary: `hooks install` finds it there to know the build is current */
__attribute__((used)) static const char BUILD[] = "loopwarden-hook-fast build " LW_BUILD_ID;
#define MAX_STR_DIGITS 4300 /* Python's int() limit (sys.get_int_max_str_digits) */
#define TIMED_OUT (-1000)   /* Python's TimeoutError("timed out"), not an errno */

/* ---- byte buffers ---- */

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void reserve(buf *b, size_t more) {
    if (b->n + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        fputs("loopwarden-hook: out of memory\n", stderr);
        exit(1);
    }
    b->p = p;
    b->cap = cap;
}

static void put(buf *b, const void *s, size_t n) {
    reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void putc_(buf *b, unsigned char c) { put(b, &c, 1); }

static void putf(buf *b, const char *fmt, long long v) {
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    put(b, tmp, (size_t)n);
}

static const char HEX[] = "0123456789abcdef";

/* ---- Python's text rules, for text whose characters are all below U+0100 (held one
 * byte a character, as latin-1) ---- */

static int py_space(unsigned char c) { /* str.isspace() */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0;
}

static int py_printable(unsigned char c) { /* str.isprintable() */
    return (c >= 0x20 && c < 0x7f) || (c >= 0xa1 && c != 0xad);
}

/* repr(s), its first `limit` characters (0: all). */
static void py_repr(buf *out, const unsigned char *s, size_t n, size_t limit) {
    buf r = {0};
    int dq = memchr(s, '\'', n) && !memchr(s, '"', n);
    char q = dq ? '"' : '\'';
    putc_(&r, (unsigned char)q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == (unsigned char)q || c == '\\') {
            putc_(&r, '\\');
            putc_(&r, c);
        } else if (c == '\t') {
            puts_(&r, "\\t");
        } else if (c == '\n') {
            puts_(&r, "\\n");
        } else if (c == '\r') {
            puts_(&r, "\\r");
        } else if (py_printable(c)) {
            putc_(&r, c);
        } else {
            char e[4] = {'\\', 'x', HEX[c >> 4], HEX[c & 15]};
            put(&r, e, 4);
        }
    }
    putc_(&r, (unsigned char)q);
    put(out, r.p, limit && r.n > limit ? limit : r.n);
    free(r.p);
}

/* int(s) for a str that has been strip()ped: 0 with *neg and *value (saturated), or -1
 * with Python's ValueError text in `err`. */
static int py_int(const unsigned char *s, size_t n, int *neg, unsigned long long *value, buf *err) {
    size_t i = 0, digits = 0;
    unsigned char prev = 0;
    unsigned long long v = 0;
    *neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) *neg = s[i++] == '-';
    if (i < n && s[i] == '_') goto invalid;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
        if (s[i] == '_') {
            if (prev == '_') goto invalid;
        } else {
            digits++;
            unsigned d = (unsigned)(s[i] - '0');
            v = v > (~0ULL - d) / 10 ? ~0ULL : v * 10 + d;
        }
        prev = s[i++];
    }
    if (prev == '_') goto invalid;
    if (digits > MAX_STR_DIGITS) {
        puts_(err, "Exceeds the limit (4300 digits) for integer string conversion: value has ");
        putf(err, "%lld", (long long)digits);
        puts_(err, " digits; use sys.set_int_max_str_digits() to increase the limit");
        return -1;
    }
    if (digits == 0 || i != n) goto invalid;
    *value = v;
    return 0;
invalid:
    puts_(err, "invalid literal for int() with base 10: ");
    py_repr(err, s, n, 200);
    return -1;
}

static void py_strip(const unsigned char **s, size_t *n) {
    while (*n && py_space((*s)[0])) (*s)++, (*n)--;
    while (*n && py_space((*s)[*n - 1])) (*n)--;
}

/* text (below U+0100) as UTF-8, as Python writes it to stderr */
static void put_utf8(buf *out, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x80) {
            putc_(out, s[i]);
        } else {
            putc_(out, (unsigned char)(0xc0 | (s[i] >> 6)));
            putc_(out, (unsigned char)(0x80 | (s[i] & 0x3f)));
        }
    }
}

static void put_u(buf *out, unsigned cp) {
    char e[6] = {'\\', 'u', HEX[(cp >> 12) & 15], HEX[(cp >> 8) & 15], HEX[(cp >> 4) & 15], HEX[cp & 15]};
    put(out, e, 6);
}

/* one code point of json.dumps's ensure_ascii output */
static void json_char(buf *out, unsigned cp) {
    switch (cp) {
    case '"': puts_(out, "\\\""); return;
    case '\\': puts_(out, "\\\\"); return;
    case '\n': puts_(out, "\\n"); return;
    case '\r': puts_(out, "\\r"); return;
    case '\t': puts_(out, "\\t"); return;
    case '\b': puts_(out, "\\b"); return;
    case '\f': puts_(out, "\\f"); return;
    }
    if (cp >= 0x20 && cp < 0x7f) {
        putc_(out, (unsigned char)cp);
    } else if (cp > 0xffff) {
        cp -= 0x10000;
        put_u(out, 0xd800 | (cp >> 10));
        put_u(out, 0xdc00 | (cp & 0x3ff));
    } else {
        put_u(out, cp);
    }
}

/* The length of the valid UTF-8 sequence at s (Python's codec: no surrogates, nothing
 * over U+10FFFF, no overlong forms), or 0 with *bad the bytes of its invalid start
 * (one U+FFFD for them; at least 1). */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned *cp, size_t *bad) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    *bad = 1;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        *cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        *cp = c & 0x0f;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        *cp = c & 0x07;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        if (k >= n || s[k] < lo || s[k] > hi) {
            *bad = k;
            return 0;
        }
        *cp = (*cp << 6) | (s[k] & 0x3f);
        lo = 0x80, hi = 0xbf;
    }
    return need + 1;
}

static int valid_utf8(const char *s) {
    size_t n = strlen(s), bad;
    unsigned cp;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i, &cp, &bad);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* json.dumps(s) of valid UTF-8 text */
static void json_quote_utf8(buf *out, const char *s) {
    size_t n = strlen(s), bad;
    unsigned cp;
    putc_(out, '"');
    for (size_t i = 0; i < n;) {
        i += utf8_seq((const unsigned char *)s + i, n - i, &cp, &bad);
        json_char(out, cp);
    }
    putc_(out, '"');
}

/* bytes.decode("utf-8", "replace"), encoded as UTF-8 again */
static void put_decoded(buf *out, const unsigned char *s, size_t n) {
    size_t bad;
    unsigned cp;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i, &cp, &bad);
        if (k) {
            put(out, s + i, k);
            i += k;
        } else {
            puts_(out, "\xef\xbf\xbd");
            i += bad;
        }
    }
}

/* ---- the command line, as hook.parse_args reads it ---- */

static const struct endpoint *ep;
static const char *policy = "fail-open";
static const char *url, *agent;
static double timeout_s = 10.0;
static long long max_input = LW_MAX_INPUT_BYTES;

/* Hand the call to the Python hook: its answer is the same, from Python itself. */
static void delegate(char **argv) {
    int closed = 0;
    for (char **a = argv + 1; *a; a++) closed |= !strcmp(*a, "--fail-closed");
    argv[0] = (char *)LW_PYTHON_HOOK;
    execv(LW_PYTHON_HOOK, argv);
    fprintf(stderr, "loopwarden-hook: cannot run the Python hook %s, which this command line needs (%s)\n",
            LW_PYTHON_HOOK, strerror(errno));
    exit(closed ? 2 : 1);
}

static int all_digits(const char *s, size_t min, size_t max) {
    size_t n = strlen(s);
    return n >= min && n <= max && strspn(s, "0123456789") == n;
}

static int plain_seconds(const char *s) { /* 12 or 0.25 or .5 or 3. */
    const char *dot = strchr(s, '.');
    if (!dot) return all_digits(s, 1, 9);
    size_t head = (size_t)(dot - s), tail = strlen(dot + 1);
    if (head + tail == 0 || head > 9 || tail > 9) return 0;
    return strspn(s, "0123456789") == head && strspn(dot + 1, "0123456789") == tail;
}

static int parse_args(int argc, char **argv) {
    const char *words[2];
    int nwords = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--fail-open") || !strcmp(a, "--fail-closed")) {
            policy = a + 2;
        } else if (!strcmp(a, "--url") || !strcmp(a, "--timeout-s") || !strcmp(a, "--agent-id") ||
                   !strcmp(a, "--max-input-bytes")) {
            if (i + 1 >= argc) return 0;
            const char *v = argv[++i];
            if (!strcmp(a, "--url")) {
                url = v;
            } else if (!strcmp(a, "--agent-id")) {
                agent = v;
            } else if (!strcmp(a, "--timeout-s")) {
                if (!plain_seconds(v)) return 0;
                timeout_s = strtod(v, NULL);
                if (!(timeout_s > 0)) return 0;
            } else {
                if (!all_digits(v, 1, 10)) return 0;
                max_input = strtoll(v, NULL, 10);
                if (max_input <= 0 || max_input > (1LL << 30)) return 0; /* Python reads it in one piece */
            }
        } else if (a[0] == '-') {
            return 0;
        } else {
            if (nwords == 2) return 0;
            words[nwords++] = a;
        }
    }
    if (nwords != 2) return 0;
    for (size_t k = 0; k < sizeof LW_ENDPOINTS / sizeof LW_ENDPOINTS[0]; k++) {
        if (!strcmp(LW_ENDPOINTS[k].runtime, words[0]) && !strcmp(LW_ENDPOINTS[k].event, words[1])) {
            ep = &LW_ENDPOINTS[k];
            return 1;
        }
    }
    return 0;
}

/* Python's text encodings here are UTF-8 (a UTF-8 locale, or the C locale, which Python
 * leaves for UTF-8) and nothing in the environment changes them or int()'s limit. */
static int python_is_plain(void) {
    const char *v = getenv("PYTHONIOENCODING");
    if ((v && *v) || getenv("PYTHONINTMAXSTRDIGITS")) return 0;
    v = getenv("PYTHONUTF8");
    if (v && *v) return !strcmp(v, "1");
    const char *names[] = {"LC_ALL", "LC_CTYPE", "LANG"};
    const char *loc = "C";
    for (int i = 0; i < 3; i++) {
        v = getenv(names[i]);
        if (v && *v) {
            loc = v;
            break;
        }
    }
    if (!strcmp(loc, "C") || !strcmp(loc, "POSIX")) return 1;
    const char *dot = strchr(loc, '.');
    if (!dot) return 0;
    dot++;
    size_t n = strcspn(dot, "@");
    return (n == 5 && !strncasecmp(dot, "utf-8", 5)) || (n == 4 && !strncasecmp(dot, "utf8", 4));
}

/* ---- the URL, as hook._address reads it ---- */

static char host[1024];
static long port;
static buf url_error; /* hook._address's ValueError, or the idna codec's, when not empty */

static int read_url(void) {
    size_t n = strlen(url);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)url[i] < 0x20 || (unsigned char)url[i] > 0x7e) return 0;
    const char *rest = strstr(url, "://");
    rest = rest ? rest + 3 : url;
    size_t hp = strcspn(rest, "/");
    const char *colon = NULL;
    for (size_t i = 0; i < hp; i++)
        if (rest[i] == ':') colon = rest + i;
    size_t hn = colon ? (size_t)(colon - rest) : 0;
    const char *ps = colon ? colon + 1 : rest;
    size_t pn = colon ? hp - hn - 1 : hp;
    int port_ok = pn > 0 && strspn(ps, "0123456789") >= pn;
    if (!hn || !port_ok) {
        puts_(&url_error, "--url must be http://HOST:PORT, got ");
        py_repr(&url_error, (const unsigned char *)url, n, 0);
        return 1;
    }
    const char *h = rest;
    while (hn && (*h == '[' || *h == ']')) h++, hn--;
    while (hn && (h[hn - 1] == '[' || h[hn - 1] == ']')) hn--;
    if (hn >= sizeof host || pn > 64) return 0;
    memcpy(host, h, hn);
    host[hn] = 0;
    port = 0;
    for (size_t i = 0; i < pn; i++) {
        port = port * 10 + (ps[i] - '0');
        if (port > 65535) return 0; /* Python hands it to getaddrinfo as it is */
    }
    /* the idna codec's checks of an ASCII name, which getaddrinfo's str host goes through */
    for (const char *label = host; hn;) {
        const char *dot = strchr(label, '.');
        size_t len = dot ? (size_t)(dot - label) : strlen(label);
        if (dot && (len == 0 || len >= 64)) {
            puts_(&url_error, "encoding with 'idna' codec failed (UnicodeError: label empty or too long)");
            break;
        }
        if (!dot) {
            if (len >= 64) puts_(&url_error, "encoding with 'idna' codec failed (UnicodeError: label too long)");
            break;
        }
        label = dot + 1;
    }
    return 1;
}

/* ---- no decision: hook.run's no_decision ---- */

static int no_decision(const buf *cause) {
    buf err = {0}, out = {0};
    puts_(&err, "loopwarden-hook: ");
    put_utf8(&err, (const unsigned char *)cause->p, cause->n);
    puts_(&err, "\n");
    fwrite(err.p, 1, err.n, stderr);
    if (strcmp(policy, "fail-closed") || !*ep->deny_head) return 1;
    puts_(&out, ep->deny_head);
    for (size_t i = 0; i < cause->n; i++) json_char(&out, (unsigned char)cause->p[i]);
    puts_(&out, ep->deny_tail);
    puts_(&out, "\n");
    fwrite(out.p, 1, out.n, stdout);
    return 0;
}

static int cannot_reach(const char *why, size_t n) {
    buf cause = {0};
    puts_(&cause, "cannot reach the loopwarden sidecar at ");
    puts_(&cause, url);
    puts_(&cause, " (");
    put(&cause, why, n);
    puts_(&cause, ")");
    return no_decision(&cause);
}

static int cannot_reach_errno(int e) {
    buf why = {0};
    if (e == TIMED_OUT) {
        puts_(&why, "timed out");
    } else {
        putf(&why, "[Errno %lld] ", e);
        puts_(&why, strerror(e));
    }
    return cannot_reach(why.p, why.n);
}

/* ---- the exchange: hook.post ---- */

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* poll for `events` until the deadline: 1 ready, 0 timed out (-1 errno) */
static int wait_for(int fd, short events, long long deadline) {
    for (;;) {
        long long left = deadline - now_ns();
        if (left < 0) left = 0;
        long long ms = (left + 999999) / 1000000;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, ms > 2000000000 ? 2000000000 : (int)ms);
        if (r >= 0 || errno != EINTR) return r;
    }
}

static long long timeout_ns(void) {
    double ns = timeout_s * 1e9;
    return ns > 9e17 ? 900000000000000000LL : (long long)ns;
}

/* socket.create_connection: 0 with *fd, or the last address's error (errno or TIMED_OUT) */
static int connect_to(struct addrinfo *ai, int *fd) {
    int last = 0;
    for (; ai; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) {
            last = errno;
            continue;
        }
        int e = 0;
        if (connect(s, ai->ai_addr, ai->ai_addrlen) < 0) {
            e = errno;
            if (e == EINPROGRESS) {
                int r = wait_for(s, POLLOUT, now_ns() + timeout_ns());
                if (r == 0) {
                    e = TIMED_OUT;
                } else if (r < 0) {
                    e = errno;
                } else {
                    socklen_t len = sizeof e;
                    if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len) < 0) e = errno;
                    if (e == EISCONN) e = 0;
                }
            }
        }
        if (!e) {
            *fd = s;
            return 0;
        }
        close(s);
        last = e;
    }
    return last;
}

static int send_all(int fd, const char *p, size_t n) {
    long long deadline = now_ns() + timeout_ns(); /* sendall: one deadline for all of it */
    while (n) {
        int r = wait_for(fd, POLLOUT, deadline);
        if (r == 0) return TIMED_OUT;
        if (r < 0) return errno;
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, buf *raw) {
    for (;;) {
        int r = wait_for(fd, POLLIN, now_ns() + timeout_ns()); /* recv: the timeout each time */
        if (r == 0) return TIMED_OUT;
        if (r < 0) return errno;
        reserve(raw, 65536);
        ssize_t k = recv(fd, raw->p + raw->n, 65536, 0);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return errno;
        }
        if (k == 0) return 0;
        raw->n += (size_t)k;
    }
}

/* ---- the answer: hook.post's parsing, then hook.run ---- */

static int byte_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); } /* bytes.strip() */

static int is_py_digit(unsigned char c) { return (c >= '0' && c <= '9') || c == 0xb2 || c == 0xb3 || c == 0xb9; }

static const unsigned char *find(const unsigned char *s, size_t n, const char *what) {
    size_t w = strlen(what);
    for (size_t i = 0; i + w <= n; i++)
        if (!memcmp(s + i, what, w)) return s + i;
    return NULL;
}

static int name_is(const unsigned char *s, size_t n, const char *want) {
    if (n != strlen(want)) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)want[i]) return 0;
    }
    return 1;
}

static int answer(const buf *raw) {
    const unsigned char *r = (const unsigned char *)raw->p;
    const unsigned char *sep = find(r, raw->n, "\r\n\r\n");
    static const char NOT_HTTP[] = "the sidecar's answer is not HTTP";
    if (!sep) return cannot_reach(NOT_HTTP, strlen(NOT_HTTP));
    size_t top = (size_t)(sep - r);
    const unsigned char *rest = sep + 4;
    size_t rest_n = raw->n - top - 4;
    const unsigned char *eol = find(r, top, "\r\n");
    size_t first = eol ? (size_t)(eol - r) : top;
    const unsigned char *sp1 = memchr(r, ' ', first);
    if (!sp1) return cannot_reach(NOT_HTTP, strlen(NOT_HTTP));
    const unsigned char *st = sp1 + 1, *sp2 = memchr(st, ' ', first - (size_t)(st - r));
    size_t st_n = sp2 ? (size_t)(sp2 - st) : first - (size_t)(st - r);
    int digits = st_n > 0;
    for (size_t i = 0; i < st_n; i++) digits &= is_py_digit(st[i]);
    if (!digits) return cannot_reach(NOT_HTTP, strlen(NOT_HTTP));

    const unsigned char *cl = NULL, *xe = NULL;
    size_t cl_n = 0, xe_n = 0;
    for (const unsigned char *line = eol ? eol + 2 : NULL; line;) {
        const unsigned char *end = find(line, top - (size_t)(line - r), "\r\n");
        size_t len = end ? (size_t)(end - line) : top - (size_t)(line - r);
        const unsigned char *colon = memchr(line, ':', len);
        const unsigned char *name = line, *value = colon ? colon + 1 : line + len;
        size_t name_n = colon ? (size_t)(colon - line) : len, value_n = colon ? len - name_n - 1 : 0;
        py_strip(&name, &name_n);
        py_strip(&value, &value_n);
        if (name_is(name, name_n, "content-length")) cl = value, cl_n = value_n;
        if (name_is(name, name_n, "x-loopwarden-error")) xe = value, xe_n = value_n;
        line = end ? end + 2 : NULL;
    }
    size_t body_n = rest_n;
    if (cl) {
        int neg;
        unsigned long long v;
        buf err = {0};
        if (py_int(cl, cl_n, &neg, &v, &err)) return cannot_reach(err.p, err.n);
        if (v == 0)
            body_n = 0; /* rest[:0], rest[:-0] */
        else if (neg)
            body_n = v >= rest_n ? 0 : rest_n - (size_t)v;
        else if (v < rest_n)
            body_n = (size_t)v;
    }
    int neg;
    unsigned long long status;
    buf err = {0};
    if (py_int(st, st_n, &neg, &status, &err)) return cannot_reach(err.p, err.n);

    if (status != 200) {
        buf cause = {0};
        if (xe_n) {
            put(&cause, xe, xe_n);
        } else {
            puts_(&cause, "the loopwarden sidecar answered HTTP ");
            size_t z = 0;
            while (z + 1 < st_n && st[z] == '0') z++; /* str(int(...)): no leading zeros */
            put(&cause, st + z, st_n - z);
        }
        return no_decision(&cause);
    }
    buf e = {0};
    if (xe_n) {
        puts_(&e, "loopwarden-hook: ");
        put_utf8(&e, xe, xe_n);
        puts_(&e, "\n");
    }
    size_t a = 0;
    while (a < body_n && byte_space(rest[a])) a++;
    if (a < body_n) {
        buf out = {0};
        put_decoded(&out, rest, body_n);
        puts_(&out, "\n");
        fwrite(e.p, 1, e.n, stderr);
        fwrite(out.p, 1, out.n, stdout);
        return 0;
    }
    fwrite(e.p, 1, e.n, stderr);
    return xe_n ? 1 : 0;
}

static int run(void) {
    buf in = {0};
    size_t want = (size_t)max_input + 1;
    while (in.n < want) {
        size_t chunk = want - in.n < 65536 ? want - in.n : 65536;
        reserve(&in, chunk);
        ssize_t k = read(0, in.p + in.n, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        in.n += (size_t)k;
    }
    if ((long long)in.n > max_input) {
        buf cause = {0};
        puts_(&cause, "the hook's input is over ");
        putf(&cause, "%lld", max_input);
        puts_(&cause, " bytes; not sent to loopwarden");
        return no_decision(&cause);
    }
    if (url_error.n) return cannot_reach(url_error.p, url_error.n);

    buf req = {0};
    puts_(&req, "POST /");
    puts_(&req, ep->runtime);
    puts_(&req, "/");
    puts_(&req, ep->event);
    puts_(&req, " HTTP/1.1\r\nHost: ");
    puts_(&req, host);
    putf(&req, ":%lld", port);
    putf(&req, "\r\nContent-Type: application/json\r\nContent-Length: %lld", (long long)in.n);
    puts_(&req, "\r\nConnection: close\r\nX-Loopwarden-Policy: ");
    puts_(&req, policy);
    const char *project = getenv("CLAUDE_PROJECT_DIR");
    if (!project || !*project) project = getenv("GEMINI_PROJECT_DIR");
    if (project && *project) {
        puts_(&req, "\r\nX-Loopwarden-Project: ");
        json_quote_utf8(&req, project);
    }
    if (agent && *agent) {
        puts_(&req, "\r\nX-Loopwarden-Agent: ");
        json_quote_utf8(&req, agent);
    }
    puts_(&req, "\r\n\r\n");
    put(&req, in.p, in.n);

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    char service[16];
    snprintf(service, sizeof service, "%ld", port);
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc) {
        if (rc == EAI_SYSTEM) return cannot_reach_errno(errno);
        buf why = {0};
        putf(&why, "[Errno %lld] ", rc);
        puts_(&why, gai_strerror(rc));
        return cannot_reach(why.p, why.n);
    }
    if (!ai) {
        static const char EMPTY[] = "getaddrinfo returns an empty list";
        return cannot_reach(EMPTY, strlen(EMPTY));
    }
    int fd = -1;
    int e = connect_to(ai, &fd);
    freeaddrinfo(ai);
    if (e) return cannot_reach_errno(e);
    buf raw = {0};
    e = send_all(fd, req.p, req.n);
    if (!e) e = recv_all(fd, &raw);
    close(fd);
    if (e) return cannot_reach_errno(e);
    return answer(&raw);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN); /* as in Python: a closed peer is an error, not a signal */
    const char *env_url = getenv("LOOPWARDEN_HOOKS_URL");
    url = env_url && *env_url ? env_url : LW_DEFAULT_URL;
    if (!python_is_plain() || !parse_args(argc, argv) || !read_url()) delegate(argv);
    const char *project = getenv("CLAUDE_PROJECT_DIR");
    if (!project || !*project) project = getenv("GEMINI_PROJECT_DIR");
    if ((project && !valid_utf8(project)) || (agent && !valid_utf8(agent))) delegate(argv);
    int code = run();
    fflush(stdout);
    return code;
}
