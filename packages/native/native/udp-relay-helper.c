/*
 * udp-relay-helper: the native UDP data path of @userspace-proxy/native.
 *
 * One process, N event-loop threads (--threads N). A listener is one UDP socket per thread, all
 * bound to the same address and port with SO_REUSEPORT: the kernel hashes a client's 4-tuple to
 * one socket, so all of a client's datagrams reach one thread and its session lives there alone
 * (no locks on the data path). A session is one connected upstream socket per client (address,
 * port), its replies sent back from the thread's listener socket. Datagrams move with
 * recvmmsg/sendmmsg in batches of BATCH both ways. Node keeps the endpoint choice: a new client
 * either takes an endpoint picked ahead ('P' frames, for round robin without affinity) at once,
 * or is reported ('n') and waits for Node's verdict ('V'), its datagrams queued meanwhile
 * (bounded; more are dropped and counted).
 *
 * Frames, both ways: u32 big-endian length (type byte + body), u8 type, body. Integers big-endian.
 * Node -> helper, on stdin (the main thread reads it and hands each frame to its thread):
 *   'L' u32 listener, u16 port, u32 idleMs, u32 maxSessions, u32 maxPerSource, u32 rcvbuf,
 *       u32 sessionBuf (0: the OS default), u8 alen, addr
 *                                  listen on every thread; answered by 'l'
 *   'I' u32 listener, u32 idleMs
 *                              the idle timeout from now on (known once Node serves the socket)
 *   'X' u32 listener           close it on every thread (its sessions end, 'c'); answered by 'x'
 *   'P' u32 listener, u8 thread, u32 epoch, u16 n, n x (u16 port, u8 alen, addr)
 *                              endpoints picked ahead for that thread's new sessions; a new epoch
 *                              replaces the ring, the same epoch appends; answered by 'p'
 *   'V' u64 session, u8 ok, u16 port, u8 alen, addr
 *                              Node's verdict on an 'n': connect to addr:port, or drop (ok 0)
 *   'C' u64 session, u8 reason close a session (reason as in 'c'); answered by 'c'
 * helper -> Node, on stdout (whole frames, a thread's frames of one turn in one write when the pipe
 * takes them; never a blocking write: see "Output to Node" below):
 *   'H' u32 threads, u32 version
 *   'l' u32 listener, i32 errno, u16 port
 *   'x' u32 listener
 *   'n' u64 session, u32 listener, u16 port, u8 alen, client addr
 *   'o' u64 session, u32 listener, u32 epoch, u16 port, u8 alen, client addr, u16 eport, u8 elen,
 *       endpoint addr          a session opened with a pick made ahead
 *   'c' u64 session, u64 dgramsIn, u64 bytesIn, u64 dgramsOut, u64 bytesOut, u32 dropped,
 *       u8 reason (0 idle, 1 closed, 2 error, 3 endpoint-removed, 4 refused, 5 dial-failed),
 *       i32 errno
 *   'd' u32 listener, u32 atCap, u32 queueFull   datagrams dropped since the last 'd'
 *   'p' u32 listener, u8 thread, u32 epoch
 * A malformed frame is skipped (its length says where the next one starts); a frame longer than
 * MAX_FRAME ends the process (Node restarts it). Closing stdin stops the helper.
 *
 * Arguments: --threads N; --out-max BYTES, a thread's frames waiting for Node past which it takes
 * no new client (default 4 MiB; tests lower it).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define BATCH 64
#define MAXDG 65536
#define RING 64
#define MAX_FRAME (1 << 20)
#define QUEUE_DGRAMS 64
#define QUEUE_BYTES (256 * 1024)
#define THREAD_QUEUE_BYTES (8 * 1024 * 1024)
#define OUT_FLUSH (64 * 1024)
#define OUT_MAX_DEFAULT (4 * 1024 * 1024)
#define VERSION 1
#define DROP_REPORT_MS 100

enum { K_LISTENER = 1, K_SESSION = 2, K_EVENT = 3 };
enum { S_PENDING = 0, S_OPEN = 1, S_CLOSED = 2 };
enum { R_IDLE = 0, R_CLOSED = 1, R_ERROR = 2, R_REMOVED = 3, R_REFUSED = 4, R_DIAL = 5 };

typedef union {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
} addr_t;

struct srccount {
  struct srccount *next;
  unsigned char key[17];
  uint32_t n;
};

/* A listener as every thread shares it: its limits and the counts that span threads. */
struct glistener {
  uint32_t id;
  addr_t addr;
  socklen_t alen;
  uint32_t idle_ms, max_sessions, max_per_source, session_buf;
  int sessions; /* atomic */
  int refs;     /* threads still holding it; atomic */
  pthread_mutex_t mu;
  struct srccount *src[256];
};

struct pick {
  addr_t addr;
  socklen_t alen;
  char text[INET6_ADDRSTRLEN];
  uint16_t port;
};

/* A listener in one thread: its socket, its ring of picks, its drop counts. */
struct tlistener {
  int kind;
  int fd;
  int dead;
  struct glistener *g;
  struct tlistener *next;
  uint32_t epoch;
  /* picks for new sessions: allocated on the first 'P', grown as Node's ring grows (at most RING) */
  struct pick *ring;
  int rhead, rcount, rcap;
  uint32_t drop_cap, drop_queue;
};

struct qdgram {
  struct qdgram *next;
  size_t len;
  unsigned char data[];
};

struct session {
  int kind;
  int state;
  int fd;
  uint64_t id;
  struct tlistener *l;
  addr_t client;
  socklen_t clen;
  uint64_t last_ms;
  uint64_t din, bin, dout, bout;
  uint32_t dropped;
  struct qdgram *qhead, *qtail;
  int qn;
  size_t qbytes;
  struct session *hnext;
  struct session *inext; /* in the table by id */
  struct session *lnext, *lprev;
  struct session *dnext;
};

struct cmd {
  struct cmd *next;
  uint32_t len;
  unsigned char body[];
};

struct thread {
  int idx;
  pthread_t tid;
  int epfd, evfd;
  int evkind;
  pthread_mutex_t qmu;
  struct cmd *qhead, *qtail;
  struct tlistener *listeners;
  struct session **table;
  struct session **ids; /* the same sessions by id, tsize buckets */
  size_t tsize, count;
  struct session *all;
  struct session *dead;
  uint64_t seq;
  size_t queued_bytes;
  size_t pending; /* bytes of frames waiting for Node's pipe (under outmu) */
  unsigned char *out;
  size_t outlen, outcap;
  unsigned char *bufs;
  struct mmsghdr msgs[BATCH];
  struct mmsghdr smsgs[BATCH];
  struct iovec iov[BATCH];
  struct iovec siov[BATCH];
  addr_t names[BATCH];
  uint64_t next_sweep;
  uint64_t last_drop_report;
  int drops_pending;
};

static int nthreads = 1;
static struct thread threads[MAX_THREADS];
static pthread_mutex_t outmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t glmu = PTHREAD_MUTEX_INITIALIZER;
static struct glistener **gls;
static size_t ngls, capgls;
static int listener_fds; /* listener sockets open, every thread's (atomic) */
static int next_single;  /* the thread of the next listener served by one thread (main thread only) */

static void die(const char *what) {
  fprintf(stderr, "udp-relay-helper: %s: %s\n", what, strerror(errno));
  exit(1);
}

/*
 * Room for `n` picks in a listener's ring (at most RING): Node's ring for a thread starts with a
 * few picks and doubles with use, so an idle listener's ring stays small. The picks keep their order.
 */
static void ring_reserve(struct tlistener *l, int n) {
  if (n > RING) n = RING;
  if (n <= l->rcap) return;
  int cap = l->rcap ? l->rcap : 4;
  while (cap < n) cap *= 2;
  struct pick *r = malloc((size_t)cap * sizeof *r);
  if (r == NULL) die("out of memory");
  for (int i = 0; i < l->rcount; i++) r[i] = l->ring[(l->rhead + i) % l->rcap];
  free(l->ring);
  l->ring = r;
  l->rhead = 0;
  l->rcap = cap;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) die("clock_gettime");
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t rd32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint16_t rd16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint64_t rd64(const unsigned char *p) { return ((uint64_t)rd32(p) << 32) | rd32(p + 4); }
static void wr32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static void wr16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v >> 8);
  p[1] = (unsigned char)v;
}
static void wr64(unsigned char *p, uint64_t v) {
  wr32(p, (uint32_t)(v >> 32));
  wr32(p + 4, (uint32_t)v);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) die("malloc");
  return p;
}

/*
 * Output to Node. No thread ever blocks on Node's pipe: stdout is non-blocking, a thread writes
 * its turn's frames at once when nothing waits before them, and what the pipe does not take
 * waits in a queue of chunks (whole frames of one thread, in order) that the writer thread writes
 * as the pipe drains. A thread whose chunks waiting pass out_max bytes (OUT_MAX_DEFAULT, 4 MiB)
 * takes no new client until they drain (its new sources are dropped and counted as queue-full drops); its sessions keep
 * relaying, and the frames it owes anyway (closes, acks) are still queued: at most one close per
 * session, so they stay bounded by the sessions.
 */
struct chunk {
  struct chunk *next;
  size_t *pending; /* the owner's bytes waiting, made smaller once written */
  size_t len, off;
  unsigned char data[];
};
static pthread_cond_t outcv = PTHREAD_COND_INITIALIZER;
static struct chunk *ohead, *otail;
static int owriting;          /* the writer thread writes ohead outside the lock */
static size_t main_pending;   /* the main thread's bytes waiting (its answers: never refused) */
static size_t out_max = OUT_MAX_DEFAULT; /* --out-max BYTES (tests fill it with a few frames) */

static void enqueue_out(size_t *pending, const unsigned char *p, size_t n) {
  struct chunk *c = malloc(sizeof(*c) + n);
  if (c == NULL) die("out of memory");
  c->next = NULL;
  c->pending = pending;
  c->len = n;
  c->off = 0;
  memcpy(c->data, p, n);
  if (otail != NULL) otail->next = c;
  else ohead = c;
  otail = c;
  __atomic_add_fetch(pending, n, __ATOMIC_RELAXED);
  if (pthread_cond_signal(&outcv) != 0) die("signal");
}

/* Writes frames now, or queues what the pipe does not take; never blocks on the pipe. */
static void out_write(size_t *pending, const unsigned char *p, size_t n) {
  if (pthread_mutex_lock(&outmu) != 0) die("lock");
  while (n > 0 && !owriting && ohead == NULL) {
    ssize_t w = write(1, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      _exit(0); /* Node went away */
    }
    p += w;
    n -= (size_t)w;
  }
  if (n > 0) enqueue_out(pending, p, n);
  if (pthread_mutex_unlock(&outmu) != 0) die("unlock");
}

/* The writer thread: writes the queued chunks in order as the pipe takes them. */
static void *writer_main(void *arg) {
  (void)arg;
  for (;;) {
    if (pthread_mutex_lock(&outmu) != 0) die("lock");
    while (ohead == NULL) {
      if (pthread_cond_wait(&outcv, &outmu) != 0) die("wait");
    }
    struct chunk *c = ohead;
    owriting = 1;
    if (pthread_mutex_unlock(&outmu) != 0) die("unlock");
    while (c->off < c->len) {
      ssize_t w = write(1, c->data + c->off, c->len - c->off);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          struct pollfd pfd = {.fd = 1, .events = POLLOUT};
          (void)poll(&pfd, 1, -1);
          continue;
        }
        _exit(0);
      }
      c->off += (size_t)w;
    }
    if (pthread_mutex_lock(&outmu) != 0) die("lock");
    ohead = c->next;
    if (ohead == NULL) otail = NULL;
    __atomic_sub_fetch(c->pending, c->len, __ATOMIC_RELAXED);
    owriting = 0;
    if (pthread_mutex_unlock(&outmu) != 0) die("unlock");
    free(c);
  }
  return NULL;
}

/* True while a thread's frames waiting for Node pass out_max: it takes no new client. */
static int out_full(struct thread *t) {
  return __atomic_load_n(&t->pending, __ATOMIC_RELAXED) >= out_max;
}

/* Writes frames now (the main thread's answers). */
static void emit_now(const unsigned char *f, size_t n) { out_write(&main_pending, f, n); }

static void flush_out(struct thread *t) {
  if (t->outlen == 0) return;
  out_write(&t->pending, t->out, t->outlen);
  t->outlen = 0;
}

/* Room for one frame of `body` bytes after its type in the thread's buffer; returns the body. */
static unsigned char *frame(struct thread *t, unsigned char type, size_t body) {
  size_t need = 5 + body;
  if (t->outlen + need > t->outcap) {
    flush_out(t);
    if (need > t->outcap) {
      unsigned char *n = realloc(t->out, need);
      if (n == NULL) die("realloc");
      t->out = n;
      t->outcap = need;
    }
  }
  unsigned char *p = t->out + t->outlen;
  wr32(p, (uint32_t)(1 + body));
  p[4] = type;
  t->outlen += need;
  return p + 5;
}

static int parse_addr(const char *text, uint16_t port, addr_t *a, socklen_t *len) {
  memset(a, 0, sizeof(*a));
  if (inet_pton(AF_INET, text, &a->in.sin_addr) == 1) {
    a->in.sin_family = AF_INET;
    a->in.sin_port = htons(port);
    *len = sizeof(a->in);
    return 0;
  }
  if (inet_pton(AF_INET6, text, &a->in6.sin6_addr) == 1) {
    a->in6.sin6_family = AF_INET6;
    a->in6.sin6_port = htons(port);
    *len = sizeof(a->in6);
    return 0;
  }
  return -1;
}

static size_t addr_text(const addr_t *a, char *out, uint16_t *port) {
  const char *r;
  if (a->sa.sa_family == AF_INET) {
    r = inet_ntop(AF_INET, &a->in.sin_addr, out, INET6_ADDRSTRLEN);
    *port = ntohs(a->in.sin_port);
  } else {
    r = inet_ntop(AF_INET6, &a->in6.sin6_addr, out, INET6_ADDRSTRLEN);
    *port = ntohs(a->in6.sin6_port);
  }
  if (r == NULL) {
    out[0] = '?';
    out[1] = 0;
  }
  return strlen(out);
}

/* ---- per-source counts (shared by the threads of one listener; touched at open and close) ---- */

static void src_key(const addr_t *a, unsigned char key[17]) {
  memset(key, 0, 17);
  if (a->sa.sa_family == AF_INET) {
    key[0] = 4;
    memcpy(key + 1, &a->in.sin_addr, 4);
  } else {
    key[0] = 6;
    memcpy(key + 1, &a->in6.sin6_addr, 16);
  }
}

static unsigned src_hash(const unsigned char key[17]) {
  unsigned h = 2166136261u;
  for (int i = 0; i < 17; i++) h = (h ^ key[i]) * 16777619u;
  return h & 255;
}

/* Takes one session of the client's address; 0 when its share is used up. */
static int src_take(struct glistener *g, const addr_t *a) {
  unsigned char key[17];
  src_key(a, key);
  unsigned h = src_hash(key);
  int ok = 1;
  if (pthread_mutex_lock(&g->mu) != 0) die("lock");
  struct srccount *c = g->src[h];
  while (c != NULL && memcmp(c->key, key, 17) != 0) c = c->next;
  if (c == NULL) {
    c = xmalloc(sizeof(*c));
    memcpy(c->key, key, 17);
    c->n = 0;
    c->next = g->src[h];
    g->src[h] = c;
  }
  if (c->n >= g->max_per_source) ok = 0;
  else c->n++;
  if (pthread_mutex_unlock(&g->mu) != 0) die("unlock");
  return ok;
}

static void src_give(struct glistener *g, const addr_t *a) {
  unsigned char key[17];
  src_key(a, key);
  unsigned h = src_hash(key);
  if (pthread_mutex_lock(&g->mu) != 0) die("lock");
  struct srccount **pp = &g->src[h];
  while (*pp != NULL && memcmp((*pp)->key, key, 17) != 0) pp = &(*pp)->next;
  if (*pp != NULL && --(*pp)->n == 0) {
    struct srccount *c = *pp;
    *pp = c->next;
    free(c);
  }
  if (pthread_mutex_unlock(&g->mu) != 0) die("unlock");
}

/* ---- sessions of one thread: a hash table by (listener, client) ---- */

static size_t sess_hash(const struct tlistener *l, const addr_t *a, size_t mask) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)l;
  const unsigned char *p;
  size_t n;
  if (a->sa.sa_family == AF_INET) {
    p = (const unsigned char *)&a->in.sin_addr;
    n = 4;
    h = (h ^ a->in.sin_port) * 1099511628211ull;
  } else {
    p = (const unsigned char *)&a->in6.sin6_addr;
    n = 16;
    h = (h ^ a->in6.sin6_port) * 1099511628211ull;
  }
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return (size_t)(h ^ (h >> 29)) & mask;
}

static int same_client(const addr_t *a, const addr_t *b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET)
    return a->in.sin_port == b->in.sin_port &&
           a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
  return a->in6.sin6_port == b->in6.sin6_port &&
         memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, 16) == 0;
}

static struct session *sess_find(struct thread *t, struct tlistener *l, const addr_t *a) {
  struct session *s = t->table[sess_hash(l, a, t->tsize - 1)];
  while (s != NULL && !(s->l == l && same_client(&s->client, a))) s = s->hnext;
  return s;
}

static void sess_insert(struct thread *t, struct session *s) {
  if (t->count + 1 > t->tsize) {
    size_t nsize = t->tsize * 2;
    struct session **nt = calloc(nsize, sizeof(*nt));
    struct session **ni = nt == NULL ? NULL : calloc(nsize, sizeof(*ni));
    if (nt != NULL && ni == NULL) {
      free(nt);
      nt = NULL;
    }
    if (nt != NULL) {
      for (size_t i = 0; i < t->tsize; i++) {
        struct session *c = t->ids[i];
        while (c != NULL) {
          struct session *next = c->inext;
          size_t h = (size_t)(c->id >> 6) & (nsize - 1);
          c->inext = ni[h];
          ni[h] = c;
          c = next;
        }
      }
      free(t->ids);
      t->ids = ni;
      for (size_t i = 0; i < t->tsize; i++) {
        struct session *c = t->table[i];
        while (c != NULL) {
          struct session *next = c->hnext;
          size_t h = sess_hash(c->l, &c->client, nsize - 1);
          c->hnext = nt[h];
          nt[h] = c;
          c = next;
        }
      }
      free(t->table);
      t->table = nt;
      t->tsize = nsize;
    }
  }
  size_t h = sess_hash(s->l, &s->client, t->tsize - 1);
  s->hnext = t->table[h];
  t->table[h] = s;
  size_t ih = (size_t)(s->id >> 6) & (t->tsize - 1);
  s->inext = t->ids[ih];
  t->ids[ih] = s;
  s->lnext = t->all;
  s->lprev = NULL;
  if (t->all != NULL) t->all->lprev = s;
  t->all = s;
  t->count++;
}

static void sess_unlink(struct thread *t, struct session *s) {
  struct session **pp = &t->table[sess_hash(s->l, &s->client, t->tsize - 1)];
  while (*pp != NULL && *pp != s) pp = &(*pp)->hnext;
  if (*pp == s) *pp = s->hnext;
  struct session **ip = &t->ids[(size_t)(s->id >> 6) & (t->tsize - 1)];
  while (*ip != NULL && *ip != s) ip = &(*ip)->inext;
  if (*ip == s) *ip = s->inext;
  if (s->lprev != NULL) s->lprev->lnext = s->lnext;
  else t->all = s->lnext;
  if (s->lnext != NULL) s->lnext->lprev = s->lprev;
  t->count--;
}

static void drop_queue(struct thread *t, struct session *s) {
  struct qdgram *q = s->qhead;
  while (q != NULL) {
    struct qdgram *n = q->next;
    t->queued_bytes -= q->len;
    s->dropped++;
    free(q);
    q = n;
  }
  s->qhead = s->qtail = NULL;
  s->qn = 0;
  s->qbytes = 0;
}

/* Ends a session: reported ('c'), unlinked now, freed at the end of the turn. */
static void sess_close(struct thread *t, struct session *s, int reason, int err) {
  if (s->state == S_CLOSED) return;
  drop_queue(t, s);
  if (s->fd >= 0) {
    if (close(s->fd) != 0 && errno != EINTR) { /* the descriptor is gone either way */
    }
    s->fd = -1;
  }
  unsigned char *p = frame(t, 'c', 49);
  wr64(p, s->id);
  wr64(p + 8, s->din);
  wr64(p + 16, s->bin);
  wr64(p + 24, s->dout);
  wr64(p + 32, s->bout);
  wr32(p + 40, s->dropped);
  p[44] = (unsigned char)reason;
  wr32(p + 45, (uint32_t)err);
  s->state = S_CLOSED;
  sess_unlink(t, s);
  __atomic_sub_fetch(&s->l->g->sessions, 1, __ATOMIC_RELAXED);
  src_give(s->l->g, &s->client);
  s->dnext = t->dead;
  t->dead = s;
}

/* Connects a session's upstream socket; 0 or an errno. */
static int sess_connect(struct thread *t, struct session *s, const addr_t *to, socklen_t tolen) {
  int fd = socket(to->sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int buf = (int)s->l->g->session_buf;
  /* A smaller buffer than asked (net.core.rmem_max) is not an error, as in Node. */
  if (buf > 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)) != 0 ||
                  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)) != 0)) {
  }
  if (connect(fd, &to->sa, tolen) != 0) {
    int e = errno;
    if (close(fd) != 0) { /* nothing more to release */
    }
    return e;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
  if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int e = errno;
    if (close(fd) != 0) {
    }
    return e;
  }
  s->fd = fd;
  s->state = S_OPEN;
  return 0;
}

static void sess_send_one(struct session *s, const unsigned char *data, size_t len) {
  ssize_t w = send(s->fd, data, len, MSG_DONTWAIT);
  if (w < 0) {
    s->dropped++;
    return;
  }
  s->din++;
  s->bin += len;
}

static void flush_queue(struct thread *t, struct session *s) {
  struct qdgram *q = s->qhead;
  s->qhead = s->qtail = NULL;
  while (q != NULL) {
    struct qdgram *n = q->next;
    t->queued_bytes -= q->len;
    if (s->state == S_OPEN) sess_send_one(s, q->data, q->len);
    free(q);
    q = n;
  }
  s->qn = 0;
  s->qbytes = 0;
}

static void enqueue(struct thread *t, struct session *s, const unsigned char *data, size_t len) {
  if (s->qn >= QUEUE_DGRAMS || s->qbytes + len > QUEUE_BYTES ||
      t->queued_bytes + len > THREAD_QUEUE_BYTES) {
    s->dropped++;
    s->l->drop_queue++;
    t->drops_pending = 1;
    return;
  }
  struct qdgram *q = malloc(sizeof(*q) + len);
  if (q == NULL) {
    s->dropped++;
    s->l->drop_queue++;
    t->drops_pending = 1;
    return;
  }
  q->next = NULL;
  q->len = len;
  memcpy(q->data, data, len);
  if (s->qtail != NULL) s->qtail->next = q;
  else s->qhead = q;
  s->qtail = q;
  s->qn++;
  s->qbytes += len;
  t->queued_bytes += len;
}

/* A datagram from a client with no session: opens one (pick ahead) or asks Node. */
static struct session *sess_new(struct thread *t, struct tlistener *l, const addr_t *from,
                                socklen_t flen, uint64_t now) {
  struct glistener *g = l->g;
  if (out_full(t)) { /* Node is not reading: a new client waits for nothing but it */
    l->drop_queue++;
    t->drops_pending = 1;
    return NULL;
  }
  int n = __atomic_add_fetch(&g->sessions, 1, __ATOMIC_RELAXED);
  if ((uint32_t)n > g->max_sessions) {
    __atomic_sub_fetch(&g->sessions, 1, __ATOMIC_RELAXED);
    l->drop_cap++;
    t->drops_pending = 1;
    return NULL;
  }
  if (!src_take(g, from)) {
    __atomic_sub_fetch(&g->sessions, 1, __ATOMIC_RELAXED);
    l->drop_cap++;
    t->drops_pending = 1;
    return NULL;
  }
  struct session *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    __atomic_sub_fetch(&g->sessions, 1, __ATOMIC_RELAXED);
    src_give(g, from);
    l->drop_queue++;
    t->drops_pending = 1;
    return NULL;
  }
  s->kind = K_SESSION;
  s->state = S_PENDING;
  s->fd = -1;
  s->id = (++t->seq << 6) | (uint64_t)t->idx;
  s->l = l;
  s->client = *from;
  s->clen = flen;
  s->last_ms = now;
  sess_insert(t, s);
  char text[INET6_ADDRSTRLEN];
  uint16_t cport;
  size_t alen = addr_text(from, text, &cport);
  if (l->rcount > 0) {
    struct pick *pk = &l->ring[l->rhead];
    l->rhead = (l->rhead + 1) % l->rcap;
    l->rcount--;
    size_t elen = strlen(pk->text);
    unsigned char *p = frame(t, 'o', 8 + 4 + 4 + 2 + 1 + alen + 2 + 1 + elen);
    wr64(p, s->id);
    wr32(p + 8, g->id);
    wr32(p + 12, l->epoch);
    wr16(p + 16, cport);
    p[18] = (unsigned char)alen;
    memcpy(p + 19, text, alen);
    wr16(p + 19 + alen, pk->port);
    p[21 + alen] = (unsigned char)elen;
    memcpy(p + 22 + alen, pk->text, elen);
    int e = sess_connect(t, s, &pk->addr, pk->alen);
    if (e != 0) {
      sess_close(t, s, R_DIAL, e);
      return NULL;
    }
    return s;
  }
  unsigned char *p = frame(t, 'n', 8 + 4 + 2 + 1 + alen);
  wr64(p, s->id);
  wr32(p + 8, g->id);
  wr16(p + 12, cport);
  p[14] = (unsigned char)alen;
  memcpy(p + 15, text, alen);
  return s;
}

static void send_run(struct session *s, struct mmsghdr *m, unsigned n) {
  unsigned done = 0;
  while (done < n) {
    int r = sendmmsg(s->fd, m + done, n - done, MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      /* A full send buffer (EAGAIN) or ICMP feedback: the rest of the run is lost. */
      s->dropped += n - done;
      return;
    }
    for (int i = 0; i < r; i++) {
      s->din++;
      s->bin += m[done + (unsigned)i].msg_len;
    }
    done += (unsigned)r;
  }
}

/* The listener socket is readable: a batch of client datagrams. */
static void on_listener(struct thread *t, struct tlistener *l) {
  for (int i = 0; i < BATCH; i++) {
    t->iov[i].iov_base = t->bufs + (size_t)i * MAXDG;
    t->iov[i].iov_len = MAXDG;
    memset(&t->msgs[i].msg_hdr, 0, sizeof(t->msgs[i].msg_hdr));
    t->msgs[i].msg_hdr.msg_iov = &t->iov[i];
    t->msgs[i].msg_hdr.msg_iovlen = 1;
    t->msgs[i].msg_hdr.msg_name = &t->names[i];
    t->msgs[i].msg_hdr.msg_namelen = sizeof(t->names[i]);
  }
  int n = recvmmsg(l->fd, t->msgs, BATCH, MSG_DONTWAIT, NULL);
  if (n <= 0) return; /* EAGAIN, EINTR, or an error queued by ICMP: nothing to relay */
  uint64_t now = now_ms();
  struct session *run = NULL;
  unsigned run_start = 0, run_n = 0;
  for (int i = 0; i < n; i++) {
    struct msghdr *h = &t->msgs[i].msg_hdr;
    size_t len = t->msgs[i].msg_len;
    if (h->msg_flags & MSG_TRUNC) { /* larger than any UDP payload: cannot happen; dropped */
      l->drop_queue++;
      t->drops_pending = 1;
      continue;
    }
    addr_t *from = &t->names[i];
    if (from->sa.sa_family != AF_INET && from->sa.sa_family != AF_INET6) continue;
    struct session *s = sess_find(t, l, from);
    if (s == NULL) {
      s = sess_new(t, l, from, h->msg_namelen, now);
      if (s == NULL) continue;
    }
    s->last_ms = now;
    if (s->state != S_OPEN) {
      enqueue(t, s, t->iov[i].iov_base, len);
      continue;
    }
    if (run != s || run_start + run_n != (unsigned)i) {
      if (run != NULL && run->state == S_OPEN) send_run(run, t->smsgs + run_start, run_n);
      run = s;
      run_start = (unsigned)i;
      run_n = 0;
    }
    t->siov[i].iov_base = t->iov[i].iov_base;
    t->siov[i].iov_len = len;
    memset(&t->smsgs[i].msg_hdr, 0, sizeof(t->smsgs[i].msg_hdr));
    t->smsgs[i].msg_hdr.msg_iov = &t->siov[i];
    t->smsgs[i].msg_hdr.msg_iovlen = 1;
    run_n++;
  }
  if (run != NULL && run->state == S_OPEN) send_run(run, t->smsgs + run_start, run_n);
}

/* A session's upstream socket is readable: a batch of replies, sent from the listener socket. */
static void on_session(struct thread *t, struct session *s) {
  if (s->state != S_OPEN) return;
  for (int i = 0; i < BATCH; i++) {
    t->iov[i].iov_base = t->bufs + (size_t)i * MAXDG;
    t->iov[i].iov_len = MAXDG;
    memset(&t->msgs[i].msg_hdr, 0, sizeof(t->msgs[i].msg_hdr));
    t->msgs[i].msg_hdr.msg_iov = &t->iov[i];
    t->msgs[i].msg_hdr.msg_iovlen = 1;
  }
  int n = recvmmsg(s->fd, t->msgs, BATCH, MSG_DONTWAIT, NULL);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    /* ECONNREFUSED (ICMP port unreachable): the endpoint went away, as core's session ends. */
    sess_close(t, s, R_ERROR, errno);
    return;
  }
  if (n == 0) return;
  s->last_ms = now_ms();
  for (int i = 0; i < n; i++) {
    t->siov[i].iov_base = t->iov[i].iov_base;
    t->siov[i].iov_len = t->msgs[i].msg_len;
    memset(&t->smsgs[i].msg_hdr, 0, sizeof(t->smsgs[i].msg_hdr));
    t->smsgs[i].msg_hdr.msg_iov = &t->siov[i];
    t->smsgs[i].msg_hdr.msg_iovlen = 1;
    t->smsgs[i].msg_hdr.msg_name = &s->client;
    t->smsgs[i].msg_hdr.msg_namelen = s->clen;
  }
  int done = 0;
  while (done < n) {
    int r = sendmmsg(s->l->fd, t->smsgs + done, (unsigned)(n - done), MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      s->dropped += (uint32_t)(n - done);
      break;
    }
    for (int i = 0; i < r; i++) {
      s->dout++;
      s->bout += t->smsgs[done + i].msg_len;
    }
    done += r;
  }
}

static struct session *find_by_id(struct thread *t, uint64_t id) {
  struct session *s = t->ids[(size_t)(id >> 6) & (t->tsize - 1)];
  while (s != NULL && s->id != id) s = s->inext;
  return s;
}

static struct tlistener *find_listener(struct thread *t, uint32_t id) {
  for (struct tlistener *l = t->listeners; l != NULL; l = l->next)
    if (!l->dead && l->g->id == id) return l;
  return NULL;
}

static void release_glistener(struct glistener *g) {
  if (__atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  unsigned char f[9];
  wr32(f, 5);
  f[4] = 'x';
  wr32(f + 5, g->id);
  if (pthread_mutex_lock(&glmu) != 0) die("lock");
  for (size_t i = 0; i < ngls; i++) {
    if (gls[i] == g) {
      gls[i] = gls[--ngls];
      break;
    }
  }
  if (pthread_mutex_unlock(&glmu) != 0) die("unlock");
  for (int i = 0; i < 256; i++) {
    struct srccount *c = g->src[i];
    while (c != NULL) {
      struct srccount *n = c->next;
      free(c);
      c = n;
    }
  }
  if (pthread_mutex_destroy(&g->mu) != 0) { /* unused from here on */
  }
  free(g);
  emit_now(f, sizeof(f));
}

static void thread_cmd(struct thread *t, const unsigned char *b, uint32_t len) {
  if (len < 1) return;
  const unsigned char *p = b + 1;
  uint32_t n = len - 1;
  switch (b[0]) {
    case 'w': /* internal: an idle timeout changed; sweep at the new pace */
      t->next_sweep = now_ms();
      return;
    case 'a': { /* internal: add a listener socket (glistener pointer, fd) */
      struct glistener *g;
      int fd;
      if (n < sizeof(g) + sizeof(fd)) return;
      memcpy(&g, p, sizeof(g));
      memcpy(&fd, p + sizeof(g), sizeof(fd));
      struct tlistener *l = calloc(1, sizeof(*l));
      if (l == NULL) die("calloc");
      l->kind = K_LISTENER;
      l->fd = fd;
      l->g = g;
      struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
      if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl listener");
      l->next = t->listeners;
      t->listeners = l;
      t->next_sweep = now_ms();
      return;
    }
    case 'X': {
      if (n < 4) return;
      struct tlistener *l = find_listener(t, rd32(p));
      if (l == NULL) return;
      for (struct session *s = t->all, *next; s != NULL; s = next) {
        next = s->lnext;
        if (s->l == l) sess_close(t, s, R_CLOSED, 0);
      }
      l->dead = 1;
      if (close(l->fd) != 0) { /* gone either way */
      }
      __atomic_sub_fetch(&listener_fds, 1, __ATOMIC_RELAXED);
      l->fd = -1;
      flush_out(t); /* the sessions' 'c' before the 'x' */
      release_glistener(l->g);
      return;
    }
    case 'P': {
      if (n < 11) return;
      struct tlistener *l = find_listener(t, rd32(p));
      uint32_t epoch = rd32(p + 5);
      if (l == NULL) {
        /* Not this thread's (a listener served by one thread, see per_thread_sockets): the picks
         * are dropped, and acknowledged so Node knows no thread holds an older epoch's. */
        unsigned char *o = frame(t, 'p', 9);
        memcpy(o, p, 4);
        o[4] = (unsigned char)t->idx;
        wr32(o + 5, epoch);
        return;
      }
      uint16_t count = rd16(p + 9);
      if (epoch != l->epoch) {
        l->epoch = epoch;
        l->rhead = 0;
        l->rcount = 0;
      }
      ring_reserve(l, l->rcount + count);
      uint32_t at = 11;
      for (uint16_t i = 0; i < count; i++) {
        if (at + 3 > n) break;
        uint16_t port = rd16(p + at);
        uint8_t alen = p[at + 2];
        if (at + 3 + alen > n || alen >= INET6_ADDRSTRLEN) break;
        char text[INET6_ADDRSTRLEN];
        memcpy(text, p + at + 3, alen);
        text[alen] = 0;
        at += 3u + alen;
        if (l->rcount >= l->rcap) continue;
        struct pick *pk = &l->ring[(l->rhead + l->rcount) % l->rcap];
        if (parse_addr(text, port, &pk->addr, &pk->alen) != 0 || port == 0) continue;
        memcpy(pk->text, text, (size_t)alen + 1);
        pk->port = port;
        l->rcount++;
      }
      unsigned char *o = frame(t, 'p', 9);
      wr32(o, l->g->id);
      o[4] = (unsigned char)t->idx;
      wr32(o + 5, epoch);
      return;
    }
    case 'V': {
      if (n < 12) return;
      struct session *s = find_by_id(t, rd64(p));
      if (s == NULL || s->state != S_PENDING) return;
      if (p[8] == 0) {
        sess_close(t, s, R_REFUSED, 0);
        return;
      }
      uint16_t port = rd16(p + 9);
      uint8_t alen = p[11];
      char text[INET6_ADDRSTRLEN];
      addr_t to;
      socklen_t tolen;
      if (12u + alen > n || alen >= INET6_ADDRSTRLEN) {
        sess_close(t, s, R_DIAL, EINVAL);
        return;
      }
      memcpy(text, p + 12, alen);
      text[alen] = 0;
      if (parse_addr(text, port, &to, &tolen) != 0) {
        sess_close(t, s, R_DIAL, EINVAL);
        return;
      }
      int e = sess_connect(t, s, &to, tolen);
      if (e != 0) {
        sess_close(t, s, R_DIAL, e);
        return;
      }
      flush_queue(t, s);
      return;
    }
    case 'C': {
      if (n < 9) return;
      struct session *s = find_by_id(t, rd64(p));
      if (s == NULL) return;
      sess_close(t, s, p[8] <= R_DIAL ? p[8] : R_CLOSED, 0);
      return;
    }
  }
}

static void drain_cmds(struct thread *t) {
  uint64_t v;
  if (read(t->evfd, &v, sizeof(v)) < 0 && errno != EAGAIN) die("read eventfd");
  if (pthread_mutex_lock(&t->qmu) != 0) die("lock");
  struct cmd *c = t->qhead;
  t->qhead = t->qtail = NULL;
  if (pthread_mutex_unlock(&t->qmu) != 0) die("unlock");
  while (c != NULL) {
    struct cmd *next = c->next;
    thread_cmd(t, c->body, c->len);
    free(c);
    c = next;
  }
}

static void post(int ti, const unsigned char *body, uint32_t len) {
  struct thread *t = &threads[ti];
  struct cmd *c = xmalloc(sizeof(*c) + len);
  c->next = NULL;
  c->len = len;
  memcpy(c->body, body, len);
  if (pthread_mutex_lock(&t->qmu) != 0) die("lock");
  if (t->qtail != NULL) t->qtail->next = c;
  else t->qhead = c;
  t->qtail = c;
  if (pthread_mutex_unlock(&t->qmu) != 0) die("unlock");
  uint64_t one = 1;
  if (write(t->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN) die("write eventfd");
}

static uint64_t sweep_every(struct thread *t) {
  uint64_t every = 1000;
  for (struct tlistener *l = t->listeners; l != NULL; l = l->next) {
    if (l->dead) continue;
    uint64_t e = __atomic_load_n(&l->g->idle_ms, __ATOMIC_RELAXED) / 4;
    if (e < 5) e = 5;
    if (e < every) every = e;
  }
  return every;
}

static void sweep(struct thread *t, uint64_t now) {
  for (struct session *s = t->all, *next; s != NULL; s = next) {
    next = s->lnext;
    if (now - s->last_ms >= __atomic_load_n(&s->l->g->idle_ms, __ATOMIC_RELAXED))
      sess_close(t, s, R_IDLE, 0);
  }
}

/* Reports the datagrams dropped since the last report ('d'), at most every DROP_REPORT_MS. */
static void report_drops(struct thread *t, uint64_t now) {
  if (out_full(t)) { /* the counts wait for Node with the rest */
    t->last_drop_report = now;
    return;
  }
  t->drops_pending = 0;
  t->last_drop_report = now;
  for (struct tlistener *l = t->listeners; l != NULL; l = l->next) {
    if (l->dead || (l->drop_cap == 0 && l->drop_queue == 0)) continue;
    unsigned char *p = frame(t, 'd', 12);
    wr32(p, l->g->id);
    wr32(p + 4, l->drop_cap);
    wr32(p + 8, l->drop_queue);
    l->drop_cap = l->drop_queue = 0;
  }
}

static void *thread_main(void *arg) {
  struct thread *t = arg;
  struct epoll_event evs[64];
  t->next_sweep = now_ms() + 1000;
  for (;;) {
    uint64_t now = now_ms();
    uint64_t wake = t->next_sweep;
    if (t->drops_pending && t->last_drop_report + DROP_REPORT_MS < wake)
      wake = t->last_drop_report + DROP_REPORT_MS;
    int timeout = wake > now ? (int)(wake - now) : 0;
    int n = epoll_wait(t->epfd, evs, 64, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; i++) {
      int kind = *(int *)evs[i].data.ptr;
      if (kind == K_EVENT) drain_cmds(t);
      else if (kind == K_LISTENER) {
        struct tlistener *l = evs[i].data.ptr;
        if (!l->dead) on_listener(t, l);
      } else if (kind == K_SESSION) {
        struct session *s = evs[i].data.ptr;
        if (evs[i].events & EPOLLERR) {
          int e = 0;
          socklen_t el = sizeof(e);
          if (s->state == S_OPEN &&
              getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e != 0) {
            sess_close(t, s, R_ERROR, e);
            continue;
          }
        }
        on_session(t, s);
      }
    }
    now = now_ms();
    if (now >= t->next_sweep) {
      sweep(t, now);
      t->next_sweep = now + sweep_every(t);
    }
    if (t->drops_pending && now >= t->last_drop_report + DROP_REPORT_MS) report_drops(t, now);
    flush_out(t);
    while (t->dead != NULL) {
      struct session *s = t->dead;
      t->dead = s->dnext;
      free(s);
    }
    for (struct tlistener **pp = &t->listeners; *pp != NULL;) {
      if ((*pp)->dead) {
        struct tlistener *l = *pp;
        *pp = l->next;
        free(l->ring);
        free(l);
      } else {
        pp = &(*pp)->next;
      }
    }
  }
  return NULL;
}

static int bind_one(const addr_t *a, socklen_t alen, uint32_t rcvbuf, int *out) {
  int fd = socket(a->sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1, zero = 0;
  int e = 0;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) e = errno;
  if (e == 0 && a->sa.sa_family == AF_INET6 &&
      IN6_IS_ADDR_UNSPECIFIED(&a->in6.sin6_addr) &&
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0)
    e = errno;
  if (e == 0 && rcvbuf > 0) {
    int v = (int)(rcvbuf > 0x3fffffff ? 0x3fffffff : rcvbuf);
    /* A smaller buffer than asked (net.core.rmem_max) is not an error, as in Node. */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0) e = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0) e = 0;
  }
  if (e == 0 && bind(fd, &a->sa, alen) != 0) e = errno;
  if (e != 0) {
    if (close(fd) != 0) {
    }
    return e;
  }
  *out = fd;
  return 0;
}

/*
 * A socket per thread while listener sockets stay within a quarter of the descriptor limit (the
 * rest is for sessions: one socket each). Past it a listener gets one socket, served by one thread
 * (the threads take such listeners in turn): a UDP socket shared by several threads would split a
 * client's datagrams over them, and a session's upstream socket must stay with one thread.
 */
static int per_thread_sockets(void) {
  if (nthreads < 2) return 1;
  struct rlimit rl;
  long limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 1L << 20;
  return __atomic_load_n(&listener_fds, __ATOMIC_RELAXED) + nthreads <= limit / 4;
}

static void answer_listen(uint32_t id, int err, uint16_t port) {
  unsigned char f[15];
  wr32(f, 11);
  f[4] = 'l';
  wr32(f + 5, id);
  wr32(f + 9, (uint32_t)err);
  wr16(f + 13, port);
  emit_now(f, sizeof(f));
}

static void cmd_listen(const unsigned char *p, uint32_t n) {
  if (n < 27) return;
  uint32_t id = rd32(p);
  uint16_t port = rd16(p + 4);
  uint32_t idle = rd32(p + 6), maxs = rd32(p + 10), maxsrc = rd32(p + 14), rcvbuf = rd32(p + 18);
  uint32_t sbuf = rd32(p + 22);
  uint8_t alen = p[26];
  if (27u + alen > n || alen >= INET6_ADDRSTRLEN) {
    answer_listen(id, EINVAL, 0);
    return;
  }
  char text[INET6_ADDRSTRLEN];
  memcpy(text, p + 27, alen);
  text[alen] = 0;
  addr_t a;
  socklen_t len;
  if (parse_addr(text, port, &a, &len) != 0) {
    answer_listen(id, EINVAL, 0);
    return;
  }
  if (pthread_mutex_lock(&glmu) != 0) die("lock");
  int taken = 0;
  for (size_t i = 0; i < ngls && port != 0; i++) {
    /* SO_REUSEPORT would let a second listener of this helper join the first one's group. */
    if (gls[i]->alen == len && memcmp(&gls[i]->addr, &a, len) == 0) taken = 1;
  }
  if (pthread_mutex_unlock(&glmu) != 0) die("unlock");
  if (taken) {
    answer_listen(id, EADDRINUSE, 0);
    return;
  }
  /*
   * SO_REUSEPORT lets any socket of this user with the option join the group: a port held by
   * another helper or process would be shared silently, where core's exclusive bind fails with
   * EADDRINUSE. A probe without the option, bound and closed first, fails on any holder; the
   * port it gets stands for port 0.
   */
  int probe = socket(a.sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) {
    answer_listen(id, errno, 0);
    return;
  }
  int zero = 0;
  if (a.sa.sa_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a.in6.sin6_addr) &&
      setsockopt(probe, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0) {
    int pe = errno;
    if (close(probe) != 0) {
    }
    answer_listen(id, pe, 0);
    return;
  }
  if (bind(probe, &a.sa, len) != 0) {
    int pe = errno;
    if (close(probe) != 0) {
    }
    answer_listen(id, pe, 0);
    return;
  }
  if (port == 0) {
    addr_t b;
    socklen_t bl = sizeof(b);
    if (getsockname(probe, &b.sa, &bl) != 0) {
      int pe = errno;
      if (close(probe) != 0) {
      }
      answer_listen(id, pe, 0);
      return;
    }
    port = a.sa.sa_family == AF_INET ? ntohs(b.in.sin_port) : ntohs(b.in6.sin6_port);
    if (a.sa.sa_family == AF_INET) a.in.sin_port = htons(port);
    else a.in6.sin6_port = htons(port);
  }
  if (close(probe) != 0) {
    answer_listen(id, errno, 0);
    return;
  }
  int fds[MAX_THREADS];
  int e = 0, made = 0;
  int want = per_thread_sockets() ? nthreads : 1;
  int single = want == 1 && nthreads > 1 ? next_single++ % nthreads : -1;
  for (int i = 0; i < want; i++) {
    e = bind_one(&a, len, rcvbuf, &fds[i]);
    if (e != 0) break;
    made++;
  }
  if (e != 0) {
    for (int i = 0; i < made; i++)
      if (close(fds[i]) != 0) {
      }
    answer_listen(id, e, 0);
    return;
  }
  struct glistener *g = calloc(1, sizeof(*g));
  if (g == NULL) die("calloc");
  g->id = id;
  g->addr = a;
  g->alen = len;
  g->idle_ms = idle > 0 ? idle : 1;
  g->max_sessions = maxs;
  g->max_per_source = maxsrc;
  g->session_buf = sbuf > 0x3fffffff ? 0x3fffffff : sbuf;
  g->refs = want;
  if (pthread_mutex_init(&g->mu, NULL) != 0) die("mutex");
  if (pthread_mutex_lock(&glmu) != 0) die("lock");
  if (ngls == capgls) {
    capgls = capgls ? capgls * 2 : 16;
    struct glistener **ng = realloc(gls, capgls * sizeof(*ng));
    if (ng == NULL) die("realloc");
    gls = ng;
  }
  gls[ngls++] = g;
  if (pthread_mutex_unlock(&glmu) != 0) die("unlock");
  __atomic_add_fetch(&listener_fds, want, __ATOMIC_RELAXED);
  for (int i = 0; i < want; i++) {
    unsigned char body[1 + sizeof(g) + sizeof(int)];
    body[0] = 'a';
    memcpy(body + 1, &g, sizeof(g));
    memcpy(body + 1 + sizeof(g), &fds[i], sizeof(int));
    post(single >= 0 ? single : i, body, sizeof(body));
  }
  answer_listen(id, 0, port);
}

static void on_frame(const unsigned char *b, uint32_t len) {
  if (len < 1) return;
  const unsigned char *p = b + 1;
  uint32_t n = len - 1;
  switch (b[0]) {
    case 'L':
      cmd_listen(p, n);
      return;
    case 'X':
      if (n < 4) return;
      for (int i = 0; i < nthreads; i++) post(i, b, len);
      return;
    case 'I': {
      if (n < 8) return;
      uint32_t id = rd32(p), idle = rd32(p + 4);
      if (pthread_mutex_lock(&glmu) != 0) die("lock");
      for (size_t i = 0; i < ngls; i++)
        if (gls[i]->id == id) __atomic_store_n(&gls[i]->idle_ms, idle > 0 ? idle : 1, __ATOMIC_RELAXED);
      if (pthread_mutex_unlock(&glmu) != 0) die("unlock");
      for (int i = 0; i < nthreads; i++) post(i, (const unsigned char *)"w", 1);
      return;
    }
    case 'P':
      if (n < 5 || p[4] >= nthreads) return;
      post(p[4], b, len);
      return;
    case 'V':
    case 'C': {
      if (n < 8) return;
      int ti = (int)(rd64(p) & 63);
      if (ti >= nthreads) return;
      post(ti, b, len);
      return;
    }
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--threads") == 0) nthreads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--out-max") == 0 && atol(argv[i + 1]) > 0) out_max = (size_t)atol(argv[i + 1]);
  if (nthreads < 1) nthreads = 1;
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
  /* a session holds a socket, a listener one per thread: ask for the hard limit, as the TCP helper */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  int fl = fcntl(1, F_GETFL);
  if (fl < 0 || fcntl(1, F_SETFL, fl | O_NONBLOCK) != 0) die("fcntl stdout");
  pthread_t writer;
  if (pthread_create(&writer, NULL, writer_main, NULL) != 0) die("pthread_create");
  for (int i = 0; i < nthreads; i++) {
    struct thread *t = &threads[i];
    t->idx = i;
    t->evkind = K_EVENT;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (t->epfd < 0) die("epoll_create1");
    t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->evfd < 0) die("eventfd");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->evkind};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->evfd, &ev) != 0) die("epoll_ctl");
    if (pthread_mutex_init(&t->qmu, NULL) != 0) die("mutex");
    t->tsize = 1024;
    t->table = calloc(t->tsize, sizeof(*t->table));
    t->ids = calloc(t->tsize, sizeof(*t->ids));
    if (t->table == NULL || t->ids == NULL) die("calloc");
    t->outcap = OUT_FLUSH;
    t->out = xmalloc(t->outcap);
    t->bufs = xmalloc((size_t)BATCH * MAXDG);
    if (pthread_create(&t->tid, NULL, thread_main, t) != 0) die("pthread_create");
  }
  unsigned char hello[13];
  wr32(hello, 9);
  hello[4] = 'H';
  wr32(hello + 5, (uint32_t)nthreads);
  wr32(hello + 9, VERSION);
  emit_now(hello, sizeof(hello));
  size_t cap = 65536, have = 0;
  unsigned char *buf = xmalloc(cap);
  for (;;) {
    if (have == cap) die("frame buffer");
    ssize_t r = read(0, buf + have, cap - have);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("read stdin");
    }
    if (r == 0) _exit(0); /* Node closed stdin: stop */
    have += (size_t)r;
    size_t off = 0;
    while (have - off >= 4) {
      uint32_t len = rd32(buf + off);
      if (len > MAX_FRAME) {
        fprintf(stderr, "udp-relay-helper: frame of %u bytes\n", len);
        exit(2);
      }
      if (have - off - 4 < len) {
        if (4 + (size_t)len > cap) {
          unsigned char *nb = realloc(buf, 4 + (size_t)len);
          if (nb == NULL) die("realloc");
          buf = nb;
          cap = 4 + (size_t)len;
        }
        break;
      }
      on_frame(buf + off + 4, len);
      off += 4 + len;
    }
    memmove(buf, buf + off, have - off);
    have -= off;
  }
}
