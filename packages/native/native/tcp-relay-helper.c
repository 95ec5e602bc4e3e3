/*
 * tcp-relay-helper: the native TCP data path of @userspace-proxy/native.
 *
 * Node decides (where to listen, which endpoint, when to give up); this process moves the bytes.
 * N event-loop threads (default: online CPUs) each own an epoll set, their own SO_REUSEPORT
 * listening socket per listener (so the kernel spreads accepts over the threads) and the
 * connections they accepted. Past a quarter of the descriptor limit in listening sockets, a new
 * listener gets one socket that every thread waits on with EPOLLEXCLUSIVE instead: a daemon with
 * 10 000 Services on 2 threads would otherwise need 20 000 descriptors before its first client. A connection is relayed both ways with splice(2) through a pipe per
 * direction, made on the first byte; half-close, reset propagation and the idle / half-close
 * timeouts follow core's TCP socket. The main thread reads Node's listener commands from stdin
 * and hands them to the threads; each thread reads the commands for its own connections from a
 * pipe of its own (descriptor 3 + thread index), so a dial costs no hop between threads. Every
 * thread writes its events to stdout at most once per event-loop turn (frames Node need not act on
 * may wait up to 1 ms for the next write: "Lazy frames"), never blocking on Node's pipe (see
 * "Output to Node" below).
 *
 * Frames, both ways: u32 length (big-endian, of what follows), u8 type, body; integers big-endian,
 * addresses as text (u8 length + bytes, inet_pton / inet_ntop form).
 *
 * Node -> helper, on stdin
 *   'S' set-limits     u32 maxConnections, u32 keepAliveMs, u32 idleTimeoutMs, u32 halfCloseTimeoutMs
 *   'L' listen         u32 listener, u16 port, u32 backlog, addr          -> 'l'
 *   'X' close-listener u32 listener                                        -> 'x'
 *   'P' picks          u32 listener, u8 thread, u32 epoch, u32 timeoutMs, u16 count,
 *                      count x (u16 port, addr): endpoints Node picked ahead for that thread's
 *                      accepts on the listener. A new epoch empties the ring first; the ring holds
 *                      at most RING picks (Node never sends more than it has room for). -> 'p'
 * Node -> helper, on the pipe of the connection's thread (the low 6 bits of its id)
 *   'D' dial           u64 conn, u32 attempt, u32 timeoutMs, u16 port, addr -> 'd'
 *   'K' cancel         u64 conn, u32 attempt (the attempt is reset; once relaying, the connection)
 *   'C' close          u64 conn, u8 reset (0: FIN, 1: RST, 2: an accept policy's refusal: RST
 *                      when the client is unanswered, held bytes or a hand-over dial, else FIN) -> 'c'
 *   'O' hold           u64 conn, u32 maxBytes: an accept policy holds the connection. The helper
 *                      reads the client into a buffer of at most maxBytes (then stops reading),
 *                      reports what it holds ('h'), closes it at once when the client resets or
 *                      sends its FIN before any byte (a FIN after bytes is kept, for after the
 *                      dial), and writes the bytes to the endpoint first once a 'D' connected.
 *                      While a hand-over 'D' is in flight the client is still read and watched.
 * helper -> Node
 *   'H' hello          u32 threads, u32 maxConnections
 *   'l' listening      u32 listener, i32 errno (0: ok), u16 bound port
 *   'x' unlistened     u32 listener (every thread closed its socket of it)
 *   'p' picks taken    u32 listener, u8 thread, u32 epoch: the thread's ring holds that epoch's
 *                      picks from now on (an accept after this never dials an older one)
 *   'a' accepted       u64 conn, u32 listener, u16 client port, client addr
 *                      [, u32 epoch, u16 endpoint port, endpoint addr: the pick the helper took
 *                      and dials at once as attempt 1 with the ring's timeoutMs; its 'd' follows]
 *   'r' refused        u32 listener, u8 reason (1: the helper's connection cap)
 *   'e' accept-error   u32 listener, i32 errno (accepting paused with back-off)
 *   'd' dialed         u64 conn, u32 attempt, i32 errno (0: connected and relaying; ETIMEDOUT
 *                      when the attempt's timeoutMs passed first)
 *   'h' held           u64 conn, u32 bytes held, u8 eof (the client sent its FIN): after each
 *                      read of a held client, at most one per connection per turn
 *   'c' closed         u64 conn, u64 bytes client->endpoint, u64 bytes endpoint->client, u8 how
 *                      (how: 0 both sides done, 1 client reset, 2 endpoint reset, 3 closed by Node,
 *                      4 reset by Node, 5 idle timeout, 6 half-close timeout, 7 local error)
 * The 'a', 'd' and 'c' of a connection dialled from a pick may reach Node up to 1 ms late, in one
 * write with other frames ("Lazy frames"). Every accepted connection gets exactly one 'c'. A
 * connection id names its thread (low 6 bits), its slot and the slot's generation, so a late
 * command for a closed connection is ignored.
 *
 * Arguments: --threads N, --max-connections N; --out-max BYTES, a thread's frames waiting for Node
 * past which it stops accepting (default 4 MiB; tests lower it); --lazy-us N, how long a thread
 * keeps frames Node need not act on before it writes them (default 1000; see "Lazy frames");
 * --pipe-bytes BYTES, the size a bulk direction's pipe grows to (default 1 MiB; 0 keeps the
 * kernel's 64 KiB); --pipe-budget BYTES, the most all grown pipes hold together (default: half
 * the user's pipe-user-pages-soft, 32 MiB on a stock kernel; see "Pipes" above pump()).
 *
 * Built with: cc -O2 -Wall -Wextra -Werror -pthread
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#define MAX_EVENTS 256
#define ACCEPTS_PER_TURN 64
#define PIPE_CHUNK (1 << 16)
#define PIPE_BULK (1 << 20)
#define PIPE_MIN_GROWN (1 << 17)
#define MAX_FRAME (1 << 16)
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define RING 64
#define OUT_MAX_DEFAULT (4 * 1024 * 1024)
#define LAZY_US_DEFAULT 1000 /* how long frames Node need not act on may wait for company */
#define LAZY_BYTES 16384     /* and how many bytes of them */

enum kind { K_LISTENER = 1, K_SIDE, K_WAKE, K_CMD };
enum state { S_ACCEPTED, S_DIALING, S_RELAY, S_CLOSED, S_HELD };
enum how {
  HOW_DONE = 0, HOW_CLIENT_RESET, HOW_ENDPOINT_RESET, HOW_NODE_CLOSE, HOW_NODE_RESET,
  HOW_IDLE, HOW_HALF_CLOSE, HOW_ERROR
};

struct conn;
struct side { int kind; int fd; uint32_t events; int index; struct conn *c; };
/*
 * One direction. It starts copying (read(2) into the thread's buffer, write(2) out): a short
 * connection then needs no pipe. A read that fills the whole buffer means bulk, and the direction
 * switches to splice(2) through a pipe of its own. `inpipe` is what was read and not yet written:
 * in the pipe, or (copying) in `pend`, a copy made only when the receiver could not take it all.
 */
struct dir {
  int pr, pw; uint32_t inpipe, pend_off; unsigned char *pend; int eof, shut; uint64_t bytes;
  uint32_t pipe_sz; /* what one splice into the pipe asks for: its size (PIPE_CHUNK, or grown) */
  uint32_t grown;   /* bytes of the pipe budget this direction holds (0: the kernel's default) */
  int unread; /* the source was not reported readable since it connected: no read until it is */
  int rdhup;  /* epoll reported the source's FIN (EPOLLRDHUP): a short read after it is the end */
};
struct conn {
  struct side s[2]; /* 0 client, 1 endpoint */
  struct dir d[2];  /* 0 client->endpoint, 1 endpoint->client */
  uint32_t slot, gen, attempt, lid;
  int state;
  int64_t last_ms;
  int keepalive; /* the endpoint socket has keep-alive (set by the sweep, once it lived a second) */
  int holding;   /* held by an accept policy ('O'): the client is read into d[0].pend until relaying */
  uint32_t hold_max;
  int rst_armed; /* the client holds SO_LINGER {1, 0}: it is reset if this process dies (held bytes) */
  int ahead;     /* dialled from a pick made ahead: 1 while that dial runs, 2 once it connected */
  struct conn *next, *prev; /* the thread's relaying connections, for the timeout sweep */
  struct conn *wnext; int rewatch; /* what epoll watches is set once, at the end of the turn */
};
/* An endpoint picked ahead by Node (sockaddr_in6 holds a sockaddr_in as well). */
struct pick { struct sockaddr_in6 a; socklen_t len; };
struct listener {
  int kind; int fd; uint32_t lid; struct listener *next;
  uint32_t burst; uint64_t last_turn; /* accepts per event, grown while readable turn after turn */
  int shared; /* one socket for every thread (EPOLLEXCLUSIVE), closed by the last to let go */
  int armed;  /* in this thread's epoll set with EPOLLIN (a shared socket leaves it while paused) */
  /* picks for this thread's accepts: allocated on the first 'P', grown as Node's ring grows */
  struct pick *ring; uint32_t rhead, rcount, rcap, epoch, timeout_ms;
};
struct cmd {
  uint8_t type, reset, shared;
  int *left; /* 'X': threads still to close their socket; the last one says 'x' */
  uint64_t conn;
  uint32_t attempt, lid, timeout_ms, epoch, npicks, max_bytes;
  struct pick *picks; /* 'P': malloc'd by the main thread, freed by the worker */
  int fd;
  struct sockaddr_storage sa;
  socklen_t salen;
};
struct buf { unsigned char *p; size_t len, cap; };
/* A dial's deadline; stale entries (the dial ended) are skipped when they come up. */
struct deadline { int64_t at; uint64_t id; uint32_t attempt; };
struct thread {
  int index, ep, wake;
  pthread_t tid;
  pthread_mutex_t qlock;
  struct cmd *q; size_t qlen, qcap;
  struct conn **slots; uint32_t nslots, *free_slots, nfree;
  struct listener *listeners;
  struct conn *relaying;
  struct conn *dead;         /* closed this turn, freed after it (later events may name them) */
  struct conn *rewatch;      /* relaying connections whose epoll interest is set at the turn's end */
  uint64_t turn;             /* event-loop turns so far */
  struct listener *dead_listeners;
  struct buf out;
  size_t lazy_len;              /* bytes of out that are lazy frames (see "Lazy frames") */
  int64_t lazy_since_us;        /* when the first of them was written */
  int paused; int64_t resume_ms; int backoff_ms;
  int out_paused;               /* not accepting: too many frames wait for Node (atomic) */
  size_t pending;               /* bytes of frames waiting for Node's pipe (atomic) */
  int cmd_fd;                   /* Node's commands for this thread's connections */
  unsigned char *tbuf;          /* PIPE_CHUNK bytes: the copy buffer of every direction copying */
  unsigned char *cin; size_t cin_have;
  struct deadline *heap; size_t hlen, hcap; /* dial deadlines, a min-heap */
};

static struct thread threads[MAX_THREADS];
static int nthreads;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int max_conns = 16384, keepalive_ms = 15000, idle_ms = 0, half_ms = 60000;
static int open_conns;
/* the grown pipes ("Pipes" above pump()) */
static uint32_t pipe_bytes = PIPE_BULK; /* --pipe-bytes: 0 never grows */
static size_t pipe_budget;              /* --pipe-budget, or half of pipe-user-pages-soft */
static size_t pipe_used;                /* budget held by grown pipes, every thread's (atomic) */
static int listener_fds; /* listening sockets open, every thread's (atomic) */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *what) {
  fprintf(stderr, "tcp-relay-helper: %s: %s\n", what, strerror(errno));
  _exit(2);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (q == NULL) die("out of memory");
  return q;
}

/* ---- output ---- */

static void buf_reserve(struct buf *b, size_t n) {
  if (b->len + n <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n) cap *= 2;
  b->p = xrealloc(b->p, cap);
  b->cap = cap;
}
static void put8(struct buf *b, uint8_t v) { buf_reserve(b, 1); b->p[b->len++] = v; }
static void put16(struct buf *b, uint16_t v) { put8(b, v >> 8); put8(b, v & 0xff); }
static void put32(struct buf *b, uint32_t v) { put16(b, v >> 16); put16(b, v & 0xffff); }
static void put64(struct buf *b, uint64_t v) { put32(b, v >> 32); put32(b, v & 0xffffffffu); }
static size_t frame_begin(struct buf *b, uint8_t type) { size_t at = b->len; put32(b, 0); put8(b, type); return at; }
static void frame_end(struct buf *b, size_t at) {
  uint32_t n = (uint32_t)(b->len - at - 4);
  b->p[at] = n >> 24; b->p[at + 1] = n >> 16; b->p[at + 2] = n >> 8; b->p[at + 3] = n;
}
static void put_addr(struct buf *b, const struct sockaddr_storage *sa) {
  char text[INET6_ADDRSTRLEN] = "";
  const void *a = sa->ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                                           : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
  if (inet_ntop(sa->ss_family, a, text, sizeof text) == NULL) text[0] = 0;
  size_t n = strlen(text);
  put8(b, (uint8_t)n);
  buf_reserve(b, n);
  memcpy(b->p + b->len, text, n);
  b->len += n;
}
static uint16_t addr_port(const struct sockaddr_storage *sa) {
  return ntohs(sa->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
                                         : ((const struct sockaddr_in *)sa)->sin_port);
}

/*
 * Output to Node. No thread ever blocks on Node's pipe: stdout is non-blocking, a thread writes
 * its turn's frames at once when nothing waits before them, and what the pipe does not take
 * waits in a queue of chunks (whole frames of one thread, in order) that the writer thread writes
 * as the pipe drains. A thread whose chunks waiting pass out_max bytes (OUT_MAX_DEFAULT, 4 MiB)
 * stops accepting (new clients wait in the kernel's backlog) until they drain; its connections
 * keep relaying, and the frames it owes anyway (closes, dial results) are still queued: at most
 * a few per connection, so they stay bounded by the connection cap.
 */
struct chunk {
  struct chunk *next;
  struct thread *t; /* the owner, woken when its frames drained (NULL: the main thread) */
  size_t len, off;
  unsigned char data[];
};
static pthread_cond_t out_cv = PTHREAD_COND_INITIALIZER;
static struct chunk *out_head, *out_tail;
static int out_writing;       /* the writer thread writes out_head outside the lock */
static size_t main_pending;   /* the main thread's bytes waiting (its answers: never refused) */
static size_t out_max = OUT_MAX_DEFAULT; /* --out-max BYTES (tests fill it with a few frames) */
static int64_t lazy_us = LAZY_US_DEFAULT; /* --lazy-us N (tests hold lazy frames for minutes) */

static size_t *pending_of(struct thread *t) { return t != NULL ? &t->pending : &main_pending; }

/* Writes a buffer of whole frames now, or queues what the pipe does not take; never blocks. */
static void flush_from(struct thread *t, struct buf *b) {
  if (b->len == 0) return;
  if (pthread_mutex_lock(&out_lock) != 0) die("lock");
  size_t off = 0;
  while (off < b->len && !out_writing && out_head == NULL) {
    ssize_t n = write(1, b->p + off, b->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) _exit(0); /* Node is gone: so are we */
    off += (size_t)n;
  }
  if (off < b->len) {
    size_t left = b->len - off;
    struct chunk *c = malloc(sizeof *c + left);
    if (c == NULL) die("out of memory");
    c->next = NULL; c->t = t; c->len = left; c->off = 0;
    memcpy(c->data, b->p + off, left);
    if (out_tail != NULL) out_tail->next = c;
    else out_head = c;
    out_tail = c;
    __atomic_add_fetch(pending_of(t), left, __ATOMIC_RELAXED);
    if (pthread_cond_signal(&out_cv) != 0) die("signal");
  }
  pthread_mutex_unlock(&out_lock);
  b->len = 0;
}

static void flush(struct buf *b) { flush_from(NULL, b); }

/*
 * Lazy frames. A connection dialled from a pick made ahead needs nothing from Node: its 'a', the
 * 'd' of that dial when it connected and its 'c' (unless Node asked for the close) only keep Node's
 * counts and diagnostics. A turn whose frames are all of that kind keeps them for up to lazy_us
 * (LAZY_US_DEFAULT, 1 ms) or LAZY_BYTES, so that several connections' frames go in one write: at
 * one connection at a time, a write to Node and a wake-up of Node per frame batch was two of each
 * per connection. Any other frame (an error Node must act on, a per-accept 'a', a 'p', an answer
 * to a command) flushes the turn's frames, the lazy ones with it, in order. An 'a' that leaves the
 * ring half empty or less is not lazy, so that Node hears in time to top the ring up.
 */
static void lazy_frame(struct thread *t, size_t at) {
  if (t->lazy_len == 0) t->lazy_since_us = now_us();
  t->lazy_len += t->out.len - at;
}

/* True when the turn's frames go to Node now: some are not lazy, or the lazy ones waited enough. */
static int flush_due(struct thread *t) {
  if (t->out.len == 0) return 0;
  if (t->out.len > t->lazy_len || t->lazy_len >= LAZY_BYTES) return 1;
  return now_us() - t->lazy_since_us >= lazy_us;
}

/* True while a thread's frames waiting for Node pass out_max: it accepts no new client. */
static int out_full(struct thread *t) { return __atomic_load_n(&t->pending, __ATOMIC_RELAXED) >= out_max; }

/* The writer thread: writes the queued chunks in order as the pipe takes them. */
static void *writer(void *arg) {
  (void)arg;
  for (;;) {
    if (pthread_mutex_lock(&out_lock) != 0) die("lock");
    while (out_head == NULL)
      if (pthread_cond_wait(&out_cv, &out_lock) != 0) die("wait");
    struct chunk *c = out_head;
    out_writing = 1;
    pthread_mutex_unlock(&out_lock);
    while (c->off < c->len) {
      ssize_t n = write(1, c->data + c->off, c->len - c->off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        struct pollfd pfd = {.fd = 1, .events = POLLOUT};
        (void)poll(&pfd, 1, -1);
        continue;
      }
      if (n <= 0) _exit(0);
      c->off += (size_t)n;
    }
    if (pthread_mutex_lock(&out_lock) != 0) die("lock");
    out_head = c->next;
    if (out_head == NULL) out_tail = NULL;
    size_t left = __atomic_sub_fetch(pending_of(c->t), c->len, __ATOMIC_RELAXED);
    out_writing = 0;
    /* Read under the lock a thread pauses under (see thread_main): no wake is lost. */
    int paused = c->t != NULL && __atomic_load_n(&c->t->out_paused, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&out_lock);
    if (paused && left < out_max) {
      uint64_t one = 1; /* it accepts again at the end of its next turn */
      if (write(c->t->wake, &one, sizeof one) < 0 && errno != EAGAIN) die("eventfd");
    }
    free(c);
  }
  return NULL;
}

/* ---- sockets ---- */

static void set_keepalive(int fd) {
  int ms = __atomic_load_n(&keepalive_ms, __ATOMIC_RELAXED);
  if (ms <= 0) return;
  int one = 1, idle = ms / 1000 > 0 ? ms / 1000 : 1, intvl = 1, cnt = 10;
  /* Failures leave the socket usable without keep-alive, as libuv does. */
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void set_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void close_fd(int fd, int reset) {
  if (fd < 0) return;
  if (reset) {
    struct linger l = {1, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  while (close(fd) < 0 && errno == EINTR) {}
}

static int parse_addr(const char *text, uint16_t port, struct sockaddr_storage *sa, socklen_t *len) {
  memset(sa, 0, sizeof *sa);
  struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
  if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET; v4->sin_port = htons(port); *len = sizeof *v4; return 0;
  }
  if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6; v6->sin6_port = htons(port); *len = sizeof *v6; return 0;
  }
  return -1;
}

/* ---- connections ---- */

static uint64_t conn_id(struct thread *t, struct conn *c) {
  return ((uint64_t)c->gen << 32) | ((uint64_t)c->slot << 6) | (uint64_t)t->index;
}

static struct conn *find_conn(struct thread *t, uint64_t id) {
  uint32_t slot = (uint32_t)(id & 0xffffffffu) >> 6, gen = (uint32_t)(id >> 32);
  if (slot >= t->nslots) return NULL;
  struct conn *c = t->slots[slot];
  return c != NULL && c->gen == gen ? c : NULL;
}

/*
 * Sets what epoll reports for one side. No interest removes the descriptor from the set: epoll
 * reports EPOLLHUP whatever the mask, and a half-closed socket waiting on its peer would spin.
 */
static void watch(struct thread *t, struct side *s, uint32_t events) {
  if (s->fd < 0 || s->events == events || (events == 0 && s->events == UINT32_MAX)) return;
  if (events == 0) {
    if (epoll_ctl(t->ep, EPOLL_CTL_DEL, s->fd, NULL) < 0) die("epoll_ctl");
    s->events = UINT32_MAX;
    return;
  }
  struct epoll_event ev = {.events = events, .data.ptr = s};
  int op = s->events == UINT32_MAX ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(t->ep, op, s->fd, &ev) < 0) die("epoll_ctl");
  s->events = events;
}

static void unlink_relaying(struct thread *t, struct conn *c) {
  if (c->prev) c->prev->next = c->next; else if (t->relaying == c) t->relaying = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
}

/*
 * A held client whose bytes the helper read is reset, not closed with a FIN, if the helper dies:
 * a request followed by a FIN would look like a complete, empty answer. SO_LINGER {1, 0} makes the
 * kernel's close at the process's death a reset; it is cleared once the bytes were handed over
 * (relaying) and before a close asked as a FIN.
 */
static void arm_reset(struct conn *c, int on) {
  if (c->rst_armed == on) return;
  struct linger l = {on, 0};
  (void)setsockopt(c->s[0].fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  c->rst_armed = on;
}

static void conn_close(struct thread *t, struct conn *c, int how, int reset_client, int reset_endpoint) {
  if (!reset_client) arm_reset(c, 0);
  struct buf *b = &t->out;
  size_t at = frame_begin(b, 'c');
  put64(b, conn_id(t, c));
  put64(b, c->d[0].bytes);
  put64(b, c->d[1].bytes);
  put8(b, (uint8_t)how);
  frame_end(b, at);
  if (c->ahead == 2 && how != HOW_NODE_CLOSE && how != HOW_NODE_RESET) lazy_frame(t, at);
  if (c->state == S_RELAY) unlink_relaying(t, c);
  /* close(2) removes the descriptors from the epoll set */
  close_fd(c->s[0].fd, reset_client);
  close_fd(c->s[1].fd, reset_endpoint);
  for (int i = 0; i < 2; i++) {
    if (c->d[i].pr >= 0) close(c->d[i].pr);
    if (c->d[i].pw >= 0) close(c->d[i].pw);
    if (c->d[i].grown > 0) __atomic_sub_fetch(&pipe_used, c->d[i].grown, __ATOMIC_RELAXED);
    free(c->d[i].pend);
  }
  c->s[0].fd = c->s[1].fd = -1;
  c->state = S_CLOSED;
  t->slots[c->slot] = NULL;
  t->free_slots[t->nfree++] = c->slot;
  c->next = t->dead;
  t->dead = c;
  __atomic_sub_fetch(&open_conns, 1, __ATOMIC_RELAXED);
}

static struct conn *conn_new(struct thread *t, int fd, uint32_t lid) {
  uint32_t slot;
  if (t->nfree > 0) {
    slot = t->free_slots[--t->nfree];
  } else {
    if (t->nslots >= (1u << 26)) return NULL;
    uint32_t n = t->nslots ? t->nslots * 2 : 256;
    t->slots = xrealloc(t->slots, n * sizeof *t->slots);
    t->free_slots = xrealloc(t->free_slots, n * sizeof *t->free_slots);
    for (uint32_t i = t->nslots; i < n; i++) t->slots[i] = NULL;
    for (uint32_t i = n; i > t->nslots + 1; i--) t->free_slots[t->nfree++] = i - 1;
    slot = t->nslots;
    t->nslots = n;
  }
  struct conn *c = calloc(1, sizeof *c);
  if (c == NULL) { t->free_slots[t->nfree++] = slot; return NULL; }
  static __thread uint32_t gen;
  c->gen = (++gen) & 0x1fffff; /* ids stay below 2^53: exact as JavaScript numbers */
  c->slot = slot;
  c->lid = lid;
  c->state = S_ACCEPTED;
  for (int i = 0; i < 2; i++) {
    c->s[i] = (struct side){.kind = K_SIDE, .fd = -1, .events = UINT32_MAX, .index = i, .c = c};
    c->d[i] = (struct dir){.pr = -1, .pw = -1};
  }
  c->s[0].fd = fd;
  t->slots[slot] = c;
  return c;
}

/*
 * Pipes. A direction that splices asks for up to its pipe's size in one splice(2) from the
 * socket and then writes it all with one splice(2) to the other socket. With the kernel's 64 KiB
 * pipe (16 slots, one per page or skb fragment) that was about 32 KiB a call and two calls per
 * 64 KiB: 0.28-0.33 s of helper CPU per GB on one stream over loopback. Grown to 1 MiB, each call
 * moves about 0.5 MiB and the helper spends 0.12-0.16 s/GB (session 14, docs/benchmarks.md):
 * fewer calls, and fewer, larger TCP sends and window-update ACKs, whose loopback delivery the
 * sender's softirq pays for. A direction's pipe grows when it turns bulk (a full copy read), so
 * a short connection never makes one.
 *
 * The bytes in a pipe are pages the sockets no longer account for, so the process bounds what the
 * grown pipes hold together (pipe_budget) and a direction that does not fit takes the largest
 * power of two from PIPE_MIN_GROWN up that does, or keeps the default pipe. The default budget is
 * half the user's fs.pipe-user-pages-soft: past that limit an unprivileged user's new pipes get
 * 2 pages instead of 16, and F_SETPIPE_SZ refuses. A grown pipe gives its share back on close.
 */

/* Takes `want` bytes of the budget if they fit. */
static int budget_take(size_t want) {
  size_t used = __atomic_load_n(&pipe_used, __ATOMIC_RELAXED);
  do {
    if (used + want > pipe_budget) return 0;
  } while (!__atomic_compare_exchange_n(&pipe_used, &used, used + want, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return 1;
}

/* Grows direction d's new pipe (write end pw) as far as pipe_bytes and the budget allow. */
static void grow_pipe(struct dir *d) {
  d->pipe_sz = PIPE_CHUNK;
  for (uint32_t want = pipe_bytes; want >= PIPE_MIN_GROWN && want > PIPE_CHUNK; want >>= 1) {
    if (!budget_take(want)) continue;
    int got = fcntl(d->pw, F_SETPIPE_SZ, (int)want);
    if (got < (int)want) { /* refused: EPERM past pipe-max-size or the user's limits */
      __atomic_sub_fetch(&pipe_used, want, __ATOMIC_RELAXED);
      continue;
    }
    d->grown = want;
    d->pipe_sz = (uint32_t)got;
    return;
  }
}

/* The default budget: half of fs.pipe-user-pages-soft (0 there: no limit, 256 MiB here). */
static size_t default_pipe_budget(void) {
  size_t budget = (size_t)256 << 20;
  FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "r");
  unsigned long pages = 0;
  if (f != NULL) {
    if (fscanf(f, "%lu", &pages) == 1 && pages > 0) budget = pages / 2 * (size_t)sysconf(_SC_PAGESIZE);
    fclose(f);
  }
  return budget;
}

/*
 * Moves what can be moved in direction i without blocking. Returns 0, or the how of a reset.
 * The source is read only when nothing read before is waiting, so a slow receiver stops the
 * sender by TCP flow control; a direction holds at most one pipe (splicing) or PIPE_CHUNK bytes
 * (copying), never an unbounded buffer. A read shorter than asked for means the socket is drained
 * for now: the direction waits for epoll rather than asking again for an EAGAIN.
 */
static int pump(struct thread *t, struct conn *c, int i) {
  struct dir *d = &c->d[i];
  int src = c->s[i].fd, dst = c->s[1 - i].fd;
  int gone_dst = i == 0 ? HOW_ENDPOINT_RESET : HOW_CLIENT_RESET;
  int gone_src = i == 0 ? HOW_CLIENT_RESET : HOW_ENDPOINT_RESET;
  int drained = 0;
  for (;;) {
    if (d->inpipe > 0) {
      ssize_t n = d->pr >= 0
                      ? splice(d->pr, NULL, dst, NULL, d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
                      : write(dst, d->pend + d->pend_off, d->inpipe);
      if (n > 0) {
        d->inpipe -= (uint32_t)n;
        d->bytes += (uint64_t)n;
        if (d->pr < 0) d->pend_off += (uint32_t)n;
        if (d->inpipe == 0 && d->pend != NULL) { free(d->pend); d->pend = NULL; }
        /* A held client's bytes all reached the endpoint: its death is a FIN again. */
        if (i == 0 && d->inpipe == 0 && c->rst_armed) arm_reset(c, 0);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return 0;
      return gone_dst; /* EPIPE, ECONNRESET: dst is gone */
    }
    if (d->eof) {
      if (!d->shut) {
        d->shut = 1;
        /* the other way is done too: the connection closes now, and close(2) sends this FIN */
        if (c->d[1 - i].shut) return 0;
        if (shutdown(dst, SHUT_WR) < 0 && errno != ENOTCONN) return gone_dst;
      }
      return 0;
    }
    if (drained || d->unread) return 0;
    ssize_t n;
    if (d->pr >= 0) {
      n = splice(src, NULL, d->pw, NULL, d->pipe_sz, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) { d->inpipe = (uint32_t)n; drained = n < d->pipe_sz; c->last_ms = now_ms(); continue; }
    } else {
      n = read(src, t->tbuf, PIPE_CHUNK);
      if (n > 0) {
        c->last_ms = now_ms();
        ssize_t w = write(dst, t->tbuf, (size_t)n);
        if (w < 0 && errno != EAGAIN && errno != EINTR) return gone_dst;
        if (w < 0) w = 0;
        d->bytes += (uint64_t)w;
        if (w < n) {
          d->pend = malloc((size_t)(n - w));
          if (d->pend == NULL) return HOW_ERROR;
          memcpy(d->pend, t->tbuf + w, (size_t)(n - w));
          d->pend_off = 0;
          d->inpipe = (uint32_t)(n - w);
          if (n < PIPE_CHUNK && d->rdhup) d->eof = 1; /* as below: the FIN follows these bytes */
          return 0; /* wait for the receiver */
        }
        /*
         * A short read empties the socket's queue. Once epoll has reported the source's FIN
         * (before this read), every byte before it was in that queue: the stream ends here, with
         * no read(2) just to hear 0. (A short splice proves nothing: the pipe's slots bound it.)
         */
        if (n < PIPE_CHUNK && d->rdhup) { d->eof = 1; continue; }
        if (n < PIPE_CHUNK) return 0;
        /* a full buffer: bulk from now on, through a pipe (copying goes on if none can be made) */
        int p[2];
        if (pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0) { d->pr = p[0]; d->pw = p[1]; grow_pipe(d); }
        continue;
      }
    }
    if (n == 0) { d->eof = 1; c->last_ms = now_ms(); continue; }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return 0;
    return gone_src; /* ECONNRESET from src */
  }
}

/*
 * Relays the directions in `dirs` (bit i: direction i), those the event can have moved: a side
 * readable moves its own direction, a side writable the other one. Epoll is level-triggered, so a
 * direction left out is reported when it can move; pumping it anyway cost a read(2) that said
 * EAGAIN (an endpoint's answer arriving made the helper read the silent client too).
 */
static void relay(struct thread *t, struct conn *c, int dirs) {
  for (int i = 0; i < 2; i++) {
    if (!(dirs & (1 << i))) continue;
    int how = pump(t, c, i);
    if (how != 0) {
      /* the side that reset is gone; reset the other so its peer sees the cut, not an end */
      conn_close(t, c, how, how == HOW_ENDPOINT_RESET || how == HOW_ERROR,
                 how == HOW_CLIENT_RESET || how == HOW_ERROR);
      return;
    }
  }
  if (c->d[0].shut && c->d[1].shut) { conn_close(t, c, HOW_DONE, 0, 0); return; }
  /*
   * What epoll watches is set at the end of the turn (rewatch_all): a connection relayed twice in
   * one turn (both sides reported), or closed later in it, makes one epoll_ctl or none.
   */
  if (!c->rewatch) { c->rewatch = 1; c->wnext = t->rewatch; t->rewatch = c; }
}

/* The epoll interest of every connection relayed this turn and still relaying. */
static void rewatch_all(struct thread *t) {
  while (t->rewatch != NULL) {
    struct conn *c = t->rewatch;
    t->rewatch = c->wnext;
    c->rewatch = 0;
    if (c->state != S_RELAY) continue;
    for (int fdi = 0; fdi < 2; fdi++) {
      /* fd fdi is the source of direction fdi and the destination of direction 1 - fdi */
      struct dir *out = &c->d[fdi], *in = &c->d[1 - fdi];
      uint32_t ev = 0;
      if (!out->eof && out->inpipe == 0) ev |= EPOLLIN | EPOLLRDHUP;
      if (in->inpipe > 0) ev |= EPOLLOUT;
      watch(t, &c->s[fdi], ev);
    }
  }
}

static void heap_push(struct thread *t, struct deadline d) {
  if (t->hlen == t->hcap) {
    t->hcap = t->hcap ? t->hcap * 2 : 256;
    t->heap = xrealloc(t->heap, t->hcap * sizeof *t->heap);
  }
  size_t i = t->hlen++;
  while (i > 0 && t->heap[(i - 1) / 2].at > d.at) { t->heap[i] = t->heap[(i - 1) / 2]; i = (i - 1) / 2; }
  t->heap[i] = d;
}

static struct deadline heap_pop(struct thread *t) {
  struct deadline top = t->heap[0], last = t->heap[--t->hlen];
  size_t i = 0;
  for (;;) {
    size_t k = 2 * i + 1;
    if (k >= t->hlen) break;
    if (k + 1 < t->hlen && t->heap[k + 1].at < t->heap[k].at) k++;
    if (t->heap[k].at >= last.at) break;
    t->heap[i] = t->heap[k];
    i = k;
  }
  if (t->hlen > 0) t->heap[i] = last;
  return top;
}

static void reply_dialed(struct thread *t, struct conn *c, int err) {
  struct buf *b = &t->out;
  size_t at = frame_begin(b, 'd');
  put64(b, conn_id(t, c));
  put32(b, c->attempt);
  put32(b, (uint32_t)err);
  frame_end(b, at);
  if (c->ahead == 1 && c->attempt == 1) {
    /* the pick connected: Node only counts it; it failed: Node's dial schedule takes over */
    c->ahead = err == 0 ? 2 : 0;
    if (err == 0) lazy_frame(t, at);
  }
}

/* An attempt Node gave up on, or whose deadline passed: reset it, keep the client. */
static void drop_attempt(struct conn *c) {
  close_fd(c->s[1].fd, 1);
  c->s[1].fd = -1;
  c->s[1].events = UINT32_MAX;
  c->state = c->holding ? S_HELD : S_ACCEPTED;
}

/*
 * The attempt's socket reported. Writable with no error or hang-up is connected: SO_ERROR is read
 * only otherwise. Keep-alive is not set here: the sweep sets it on connections that lived a second
 * (a probe comes after keepAliveMs of silence, 15 s by default), so a short connection costs four
 * setsockopt calls fewer.
 */
static void on_dialed(struct thread *t, struct conn *c, uint32_t events) {
  int err = 0;
  socklen_t len = sizeof err;
  if ((events & (EPOLLERR | EPOLLHUP)) || !(events & EPOLLOUT)) {
    if (getsockopt(c->s[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    if (err == 0 && !(events & EPOLLOUT)) err = ECONNRESET;
  }
  reply_dialed(t, c, err);
  if (err != 0) {
    drop_attempt(c);
    return;
  }
  c->state = S_RELAY;
  c->holding = 0; /* what was held is d[0]'s pending bytes: written first, then its FIN if any */
  /* SO_LINGER {1, 0} stays until those bytes are written (pump): a death before is a reset. */
  /* A endpoint that just connected has rarely sent anything: it is read once epoll says so. */
  c->d[1].unread = 1;
  c->last_ms = now_ms();
  c->next = t->relaying;
  if (t->relaying) t->relaying->prev = c;
  t->relaying = c;
  relay(t, c, 3);
}

static void expire_dials(struct thread *t, int64_t now) {
  while (t->hlen > 0 && t->heap[0].at <= now) {
    struct deadline d = heap_pop(t);
    struct conn *c = find_conn(t, d.id);
    if (c == NULL || c->state != S_DIALING || c->attempt != d.attempt) continue;
    /*
     * Connected (or failed) in time, its event not handled yet: a busy turn handles at most
     * MAX_EVENTS, and a thread that waited for a core may find many deadlines passed at once.
     */
    struct pollfd p = {.fd = c->s[1].fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 1) {
      on_dialed(t, c, (uint32_t)p.revents); /* POLLOUT, POLLERR, POLLHUP are epoll's values */
      continue;
    }
    drop_attempt(c);
    reply_dialed(t, c, ETIMEDOUT);
  }
}

static void dial(struct thread *t, struct conn *c, struct cmd *m) {
  int err = 0;
  if (c->state != S_ACCEPTED && c->state != S_HELD) return; /* one attempt at a time */
  c->attempt = m->attempt;
  int fd = socket(m->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
  } else {
    set_nodelay(fd);
    if (connect(fd, (struct sockaddr *)&m->sa, m->salen) < 0 && errno != EINPROGRESS) err = errno;
  }
  if (err != 0) {
    if (fd >= 0) close_fd(fd, 0);
    reply_dialed(t, c, err);
    return;
  }
  c->s[1].fd = fd;
  c->s[1].events = UINT32_MAX;
  c->state = S_DIALING;
  /*
   * On loopback (and any endpoint answering within the call) the handshake completed inside
   * connect(2), which still said EINPROGRESS: ask at once instead of registering EPOLLOUT and
   * waiting a turn of the loop for it. The client's first bytes are then read and forwarded in
   * the turn that accepted it, and Node gets its 'a' and 'd' in one write.
   */
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (poll(&p, 1, 0) == 1) {
    on_dialed(t, c, (uint32_t)p.revents); /* POLLOUT, POLLERR, POLLHUP are epoll's values */
    return;
  }
  watch(t, &c->s[1], EPOLLOUT);
  if (m->timeout_ms > 0) {
    heap_push(t, (struct deadline){.at = now_ms() + m->timeout_ms, .id = m->conn, .attempt = m->attempt});
  }
}

/* ---- held clients (an accept policy's 'hold') ---- */

static void reply_held(struct thread *t, struct conn *c) {
  struct buf *b = &t->out;
  size_t at = frame_begin(b, 'h');
  put64(b, conn_id(t, c));
  put32(b, c->d[0].inpipe);
  put8(b, (uint8_t)(c->d[0].eof != 0));
  frame_end(b, at);
}

/*
 * What a held client's side is watched for: readable while there is room in its hold buffer and
 * no FIN yet; otherwise only errors and hang-ups (EPOLLET alone: epoll always reports those, and a
 * drained FIN does not make the socket report again), so a client that resets is still noticed.
 */
static void watch_held(struct thread *t, struct conn *c) {
  struct dir *d = &c->d[0];
  watch(t, &c->s[0], !d->eof && d->inpipe < c->hold_max ? EPOLLIN | EPOLLRDHUP : EPOLLET);
}

/*
 * A held (or handed-over, still dialling) client's side reported. Its bytes go into d[0].pend,
 * bounded by hold_max; a reset, a hang-up, or a FIN with nothing held (while not dialling) closes
 * the connection at once, the attempt in flight with it.
 */
static void on_held_event(struct thread *t, struct conn *c, uint32_t events) {
  struct dir *d = &c->d[0];
  int fd = c->s[0].fd, changed = 0;
  if (events & EPOLLERR) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
      conn_close(t, c, HOW_CLIENT_RESET, 0, 1);
      return;
    }
  }
  while (!d->eof && d->inpipe < c->hold_max) {
    size_t room = c->hold_max - d->inpipe;
    ssize_t n = read(fd, t->tbuf, room < PIPE_CHUNK ? room : PIPE_CHUNK);
    if (n > 0) {
      unsigned char *p = realloc(d->pend, d->inpipe + (size_t)n);
      if (p == NULL) { conn_close(t, c, HOW_ERROR, 1, 1); return; }
      memcpy(p + d->inpipe, t->tbuf, (size_t)n);
      d->pend = p;
      d->pend_off = 0;
      d->inpipe += (uint32_t)n;
      changed = 1;
      arm_reset(c, 1);
      if ((size_t)n < room && n < PIPE_CHUNK) break; /* drained for now */
      continue;
    }
    if (n == 0) {
      d->eof = 1;
      changed = 1;
      /* a client that gave up before saying anything: nothing could ever answer it */
      if (d->inpipe == 0 && c->state == S_HELD) { conn_close(t, c, HOW_DONE, 0, 1); return; }
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    conn_close(t, c, HOW_CLIENT_RESET, 0, 1);
    return;
  }
  if (!changed && (events & EPOLLHUP)) { conn_close(t, c, HOW_CLIENT_RESET, 0, 1); return; }
  if (changed) reply_held(t, c);
  watch_held(t, c);
}

static void hold(struct thread *t, struct conn *c, uint32_t max_bytes) {
  if (c->state != S_ACCEPTED || c->holding) return;
  c->holding = 1;
  c->hold_max = max_bytes > 0 ? max_bytes : 1;
  c->state = S_HELD;
  watch_held(t, c);
}

/* ---- listeners and accept ---- */

/*
 * Starts or stops this thread's accepts on `l`. A socket of its own stays in the epoll set with
 * no events while paused; a shared one leaves the set (EPOLL_CTL_MOD is refused for EPOLLEXCLUSIVE),
 * so the other threads go on accepting from it.
 */
static void arm_listener(struct thread *t, struct listener *l, int on) {
  if (!l->shared) {
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = l};
    if (epoll_ctl(t->ep, l->armed < 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, l->fd, &ev) < 0) die("epoll_ctl");
    l->armed = on;
    return;
  }
  if (on == l->armed) return;
  if (on) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = l};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, l->fd, &ev) < 0) die("epoll_ctl");
  } else if (l->armed > 0 && epoll_ctl(t->ep, EPOLL_CTL_DEL, l->fd, NULL) < 0) {
    die("epoll_ctl");
  }
  l->armed = on;
}

static void pause_accepting(struct thread *t, struct listener *l, int err) {
  struct buf *b = &t->out;
  size_t at = frame_begin(b, 'e');
  put32(b, l->lid);
  put32(b, (uint32_t)err);
  frame_end(b, at);
  t->backoff_ms = t->backoff_ms ? t->backoff_ms * 2 : BACKOFF_MIN_MS;
  if (t->backoff_ms > BACKOFF_MAX_MS) t->backoff_ms = BACKOFF_MAX_MS;
  t->paused = 1;
  t->resume_ms = now_ms() + t->backoff_ms;
  for (struct listener *x = t->listeners; x; x = x->next) arm_listener(t, x, 0);
}

static void resume_accepting(struct thread *t) {
  t->paused = 0;
  if (t->out_paused) return;
  for (struct listener *x = t->listeners; x; x = x->next) arm_listener(t, x, 1);
}

/*
 * Accepts up to l->burst connections. A listener readable in two turns running has a queue that
 * outgrew one turn's accepts, and its burst doubles (up to ACCEPTS_PER_TURN); one that was not
 * halves it. At one connection at a time that saves the accept4 that would only say EAGAIN; under
 * load the thread still accepts until the queue is empty.
 */
static void on_accept(struct thread *t, struct listener *l) {
  uint32_t burst = l->burst ? l->burst : 1;
  if (l->last_turn + 1 == t->turn) burst = burst * 2 < ACCEPTS_PER_TURN ? burst * 2 : ACCEPTS_PER_TURN;
  else if (l->last_turn + 1 < t->turn && burst > 1) burst /= 2;
  l->burst = burst;
  l->last_turn = t->turn;
  for (uint32_t k = 0; k < burst; k++) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int fd = accept4(l->fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pause_accepting(t, l, errno);
        return;
      }
      return; /* other transient errors (EPROTO, EPERM by a firewall): next event */
    }
    t->backoff_ms = 0;
    int cap = __atomic_load_n(&max_conns, __ATOMIC_RELAXED);
    int total = __atomic_add_fetch(&open_conns, 1, __ATOMIC_RELAXED);
    struct conn *c = cap > 0 && total > cap ? NULL : conn_new(t, fd, l->lid);
    if (c == NULL) __atomic_sub_fetch(&open_conns, 1, __ATOMIC_RELAXED);
    if (c == NULL) {
      close_fd(fd, 1);
      struct buf *b = &t->out;
      size_t at = frame_begin(b, 'r');
      put32(b, l->lid);
      put8(b, 1);
      frame_end(b, at);
      continue;
    }
    struct buf *b = &t->out;
    size_t at = frame_begin(b, 'a');
    put64(b, conn_id(t, c));
    put32(b, l->lid);
    put16(b, addr_port(&sa));
    put_addr(b, &sa);
    if (l->rcount == 0) { frame_end(b, at); continue; }
    /* a pick made ahead: dial at once, no round trip through Node */
    struct pick *p = &l->ring[l->rhead];
    l->rhead = (l->rhead + 1) % l->rcap;
    l->rcount--;
    struct cmd m;
    memset(&m, 0, sizeof m);
    memcpy(&m.sa, &p->a, p->len);
    m.salen = p->len;
    m.conn = conn_id(t, c);
    m.attempt = 1;
    m.timeout_ms = l->timeout_ms;
    put32(b, l->epoch);
    put16(b, addr_port(&m.sa));
    put_addr(b, &m.sa);
    frame_end(b, at);
    /* lazy while Node need not top the ring up yet (it does once a quarter of it was used) */
    if (l->rcount > l->rcap / 2) lazy_frame(t, at);
    c->ahead = 1;
    dial(t, c, &m);
  }
}

/* ---- commands from the main thread ---- */

/*
 * Room for `n` picks in a listener's ring (at most RING): Node's ring for a thread starts with a
 * few picks and doubles with use, so an idle listener's ring stays small. The picks held keep
 * their order.
 */
static void ring_reserve(struct listener *l, uint32_t n) {
  if (n > RING) n = RING;
  if (n <= l->rcap) return;
  uint32_t cap = l->rcap ? l->rcap : 4;
  while (cap < n) cap *= 2;
  struct pick *r = xrealloc(NULL, cap * sizeof *r);
  for (uint32_t i = 0; i < l->rcount; i++) r[i] = l->ring[(l->rhead + i) % l->rcap];
  free(l->ring);
  l->ring = r;
  l->rhead = 0;
  l->rcap = cap;
}

static void run_cmd(struct thread *t, struct cmd *m) {
  if (m->type == 'L') {
    struct listener *l = calloc(1, sizeof *l);
    if (l == NULL) die("out of memory");
    l->kind = K_LISTENER; l->fd = m->fd; l->lid = m->lid; l->shared = m->shared;
    l->armed = -1; /* not in the set yet: a shared socket while paused joins on resume */
    if (l->shared) l->armed = 0;
    arm_listener(t, l, !t->paused && !t->out_paused);
    l->next = t->listeners;
    t->listeners = l;
    return;
  }
  if (m->type == 'P') {
    struct listener *l = t->listeners;
    while (l != NULL && l->lid != m->lid) l = l->next;
    if (l != NULL) {
      if (l->epoch != m->epoch) { l->epoch = m->epoch; l->rhead = l->rcount = 0; }
      l->timeout_ms = m->timeout_ms;
      ring_reserve(l, l->rcount + m->npicks);
      for (uint32_t i = 0; i < m->npicks && l->rcount < l->rcap; i++, l->rcount++)
        l->ring[(l->rhead + l->rcount) % l->rcap] = m->picks[i];
      size_t at = frame_begin(&t->out, 'p');
      put32(&t->out, m->lid);
      put8(&t->out, (uint8_t)t->index);
      put32(&t->out, m->epoch);
      frame_end(&t->out, at);
    }
    free(m->picks);
    return;
  }
  if (m->type == 'X') {
    int shared_fd = -1;
    for (struct listener **p = &t->listeners; *p; p = &(*p)->next) {
      if ((*p)->lid != m->lid) continue;
      struct listener *l = *p;
      *p = l->next;
      if (l->shared) {
        /* out of this thread's set now: the socket itself is closed by the last thread */
        arm_listener(t, l, 0);
        shared_fd = l->fd;
      } else {
        close(l->fd);
        __atomic_sub_fetch(&listener_fds, 1, __ATOMIC_RELAXED);
      }
      l->fd = -1;
      free(l->ring);
      l->ring = NULL;
      l->rcount = l->rcap = 0;
      l->next = t->dead_listeners;
      t->dead_listeners = l;
      break;
    }
    if (__atomic_sub_fetch(m->left, 1, __ATOMIC_ACQ_REL) == 0) {
      free(m->left);
      if (shared_fd >= 0) {
        close(shared_fd);
        __atomic_sub_fetch(&listener_fds, 1, __ATOMIC_RELAXED);
      }
      size_t at = frame_begin(&t->out, 'x');
      put32(&t->out, m->lid);
      frame_end(&t->out, at);
    }
    return;
  }
  struct conn *c = find_conn(t, m->conn);
  if (c == NULL) return;
  if (m->type == 'D') {
    dial(t, c, m);
  } else if (m->type == 'K') {
    if (c->attempt != m->attempt) return;
    /* Node's schedule gave up on an attempt that connected meanwhile: it may have relayed bytes */
    if (c->state == S_RELAY) conn_close(t, c, HOW_NODE_RESET, 1, 1);
    else if (c->state == S_DIALING) drop_attempt(c);
  } else if (m->type == 'C') {
    int reset = m->reset == 1;
    /* a refusal: a client whose request will never be answered must not take the close for one */
    if (m->reset == 2) reset = c->state == S_DIALING || (c->holding && c->d[0].inpipe > 0);
    conn_close(t, c, reset ? HOW_NODE_RESET : HOW_NODE_CLOSE, reset, 1);
  } else if (m->type == 'O') {
    hold(t, c, m->max_bytes);
  }
}

static void drain_queue(struct thread *t) {
  uint64_t v;
  while (read(t->wake, &v, sizeof v) < 0 && errno == EINTR) {}
  for (;;) {
    if (pthread_mutex_lock(&t->qlock) != 0) die("lock");
    struct cmd *q = t->q;
    size_t n = t->qlen;
    t->q = NULL; t->qlen = 0; t->qcap = 0;
    pthread_mutex_unlock(&t->qlock);
    if (n == 0) { free(q); return; }
    for (size_t i = 0; i < n; i++) run_cmd(t, &q[i]);
    free(q);
  }
}

static uint32_t get32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }
static int get_addr(const unsigned char *p, const unsigned char *end, uint16_t port,
                    struct sockaddr_storage *sa, socklen_t *len);

/* One command for a connection of this thread; malformed ones are reported and skipped. */
static void conn_command(struct thread *t, const unsigned char *p, uint32_t n) {
  const unsigned char *end = p + n;
  struct cmd m;
  memset(&m, 0, sizeof m);
  m.type = p[0];
  p++;
  if ((m.type == 'D' && n >= 20) || (m.type == 'K' && n >= 13) || (m.type == 'C' && n >= 10) ||
      (m.type == 'O' && n >= 13)) {
    m.conn = get64(p);
    if (m.type == 'D') {
      m.attempt = get32(p + 8);
      m.timeout_ms = get32(p + 12);
      if (get_addr(p + 18, end, get16(p + 16), &m.sa, &m.salen) < 0) {
        m.type = 'C'; /* an endpoint Node could not have meant: close the client */
        m.reset = 1;
      }
    } else if (m.type == 'K') {
      m.attempt = get32(p + 8);
    } else if (m.type == 'O') {
      m.max_bytes = get32(p + 8);
    } else {
      m.reset = p[8] > 2 ? 1 : p[8];
    }
    run_cmd(t, &m);
    return;
  }
  fprintf(stderr, "tcp-relay-helper: malformed connection frame type %u length %u\n", m.type, n);
}

/* Reads this thread's command pipe until it is empty; its end means Node is gone. */
static void read_commands(struct thread *t) {
  for (;;) {
    ssize_t n = read(t->cmd_fd, t->cin + t->cin_have, MAX_FRAME * 2 - t->cin_have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) _exit(0);
    t->cin_have += (size_t)n;
    size_t off = 0;
    while (t->cin_have - off >= 4) {
      uint32_t len = get32(t->cin + off);
      if (len == 0 || len > MAX_FRAME) {
        fprintf(stderr, "tcp-relay-helper: frame length %u out of range\n", len);
        _exit(3);
      }
      if (t->cin_have - off - 4 < len) break;
      conn_command(t, t->cin + off + 4, len);
      off += 4 + len;
    }
    size_t space = MAX_FRAME * 2 - t->cin_have;
    memmove(t->cin, t->cin + off, t->cin_have - off);
    t->cin_have -= off;
    if (space > 0) return; /* a short read: the pipe is empty for now (epoll says when not) */
  }
}

static void sweep(struct thread *t, int64_t now) {
  int idle = __atomic_load_n(&idle_ms, __ATOMIC_RELAXED), half = __atomic_load_n(&half_ms, __ATOMIC_RELAXED);
  int ka = __atomic_load_n(&keepalive_ms, __ATOMIC_RELAXED) > 0;
  if (idle <= 0 && half <= 0 && !ka) return;
  for (struct conn *c = t->relaying, *next; c; c = next) {
    next = c->next;
    if (ka && !c->keepalive) { c->keepalive = 1; set_keepalive(c->s[1].fd); }
    int64_t quiet = now - c->last_ms;
    if (half > 0 && (c->d[0].eof || c->d[1].eof) && quiet >= half) conn_close(t, c, HOW_HALF_CLOSE, 1, 1);
    else if (idle > 0 && quiet >= idle) conn_close(t, c, HOW_IDLE, 1, 1);
  }
}

static void *loop(void *arg) {
  struct thread *t = arg;
  struct epoll_event evs[MAX_EVENTS];
  int64_t next_sweep = now_ms() + 1000;
  for (;;) {
    int64_t now = now_ms();
    int64_t wait = next_sweep - now;
    if (t->paused && t->resume_ms - now < wait) wait = t->resume_ms - now;
    if (t->hlen > 0 && t->heap[0].at - now < wait) wait = t->heap[0].at - now;
    if (t->out.len > 0) { /* lazy frames wait (see flush_due): wake when they are due */
      int64_t due = (t->lazy_since_us + lazy_us - now_us() + 999) / 1000;
      if (due < wait) wait = due;
    }
    if (wait < 0) wait = 0;
    int n = epoll_wait(t->ep, evs, MAX_EVENTS, (int)wait);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    t->turn++;
    /*
     * Sockets first, commands last: an event names a descriptor as it was when epoll_wait
     * returned, and a command (a cancel, then a new dial) could put another descriptor on the
     * same side before the event was handled. A connection closed earlier in the turn is marked
     * S_CLOSED and freed after it.
     */
    for (int i = 0; i < n; i++) {
      int kind = *(int *)evs[i].data.ptr;
      if (kind == K_LISTENER) {
        struct listener *l = evs[i].data.ptr;
        if (!t->paused && !t->out_paused && l->fd >= 0) on_accept(t, l);
      }
      if (kind != K_SIDE) continue;
      struct side *s = evs[i].data.ptr;
      struct conn *c = s->c;
      if (c->state == S_CLOSED || s->fd < 0) continue;
      if (c->state == S_DIALING && s->index == 1) {
        on_dialed(t, c, evs[i].events);
      } else if (c->holding && s->index == 0) {
        on_held_event(t, c, evs[i].events);
      } else if (c->state == S_RELAY) {
        int err = 0;
        socklen_t len = sizeof err;
        if ((evs[i].events & EPOLLERR) && getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0)
          conn_close(t, c, s->index == 0 ? HOW_CLIENT_RESET : HOW_ENDPOINT_RESET, s->index == 1, s->index == 0);
        else {
          uint32_t e = evs[i].events;
          int k = s->index, dirs = 0;
          if (k == 1) c->d[1].unread = 0;
          if (e & EPOLLRDHUP) c->d[k].rdhup = 1;
          if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) dirs |= 1 << k;
          if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) dirs |= 1 << (1 - k);
          relay(t, c, dirs);
        }
      } else {
        watch(t, s, 0);
      }
    }
    for (int i = 0; i < n; i++) {
      int kind = *(int *)evs[i].data.ptr;
      if (kind == K_WAKE) drain_queue(t);
      else if (kind == K_CMD) read_commands(t);
    }
    now = now_ms();
    if (t->paused && now >= t->resume_ms) resume_accepting(t);
    if (t->hlen > 0 && t->heap[0].at <= now) expire_dials(t, now);
    if (now >= next_sweep) { sweep(t, now); next_sweep = now + 1000; }
    rewatch_all(t);
    if (flush_due(t)) {
      flush_from(t, &t->out);
      t->lazy_len = 0;
    }
    /* Accepting waits while Node is behind (the writer wakes the thread once it caught up). */
    int full = out_full(t);
    if (full && !t->out_paused) {
      /* Paused under the writer's lock, its queue checked again there: had the writer drained
       * it in between, it would have seen no pause and sent no wake, and accepting would wait
       * for the next sweep. */
      if (pthread_mutex_lock(&out_lock) != 0) die("lock");
      full = out_full(t);
      if (full) __atomic_store_n(&t->out_paused, 1, __ATOMIC_RELAXED);
      pthread_mutex_unlock(&out_lock);
      if (full && !t->paused)
        for (struct listener *x = t->listeners; x; x = x->next) arm_listener(t, x, 0);
    } else if (!full && t->out_paused) {
      __atomic_store_n(&t->out_paused, 0, __ATOMIC_RELAXED);
      if (!t->paused)
        for (struct listener *x = t->listeners; x; x = x->next) arm_listener(t, x, !full);
    }
    while (t->dead) { struct conn *c = t->dead; t->dead = c->next; free(c); }
    while (t->dead_listeners) { struct listener *l = t->dead_listeners; t->dead_listeners = l->next; free(l); }
  }
  return NULL;
}


static void push(struct thread *t, struct cmd *m) {
  if (pthread_mutex_lock(&t->qlock) != 0) die("lock");
  if (t->qlen == t->qcap) {
    t->qcap = t->qcap ? t->qcap * 2 : 64;
    t->q = xrealloc(t->q, t->qcap * sizeof *t->q);
  }
  t->q[t->qlen++] = *m;
  pthread_mutex_unlock(&t->qlock);
}

/* ---- the main thread: Node's commands ---- */

/* Reads an address (u8 length + text) at p, within end; -1 when malformed. */
static int get_addr(const unsigned char *p, const unsigned char *end, uint16_t port,
                    struct sockaddr_storage *sa, socklen_t *len) {
  if (p >= end) return -1;
  size_t n = p[0];
  if (n == 0 || n >= INET6_ADDRSTRLEN || (size_t)(end - p - 1) < n) return -1;
  char text[INET6_ADDRSTRLEN];
  memcpy(text, p + 1, n);
  text[n] = 0;
  return parse_addr(text, port, sa, len);
}

static void reply_listening(uint32_t lid, int err, uint16_t port) {
  struct buf b = {0};
  size_t at = frame_begin(&b, 'l');
  put32(&b, lid);
  put32(&b, (uint32_t)err);
  put16(&b, port);
  frame_end(&b, at);
  flush(&b);
  free(b.p);
}

static int open_listener(struct sockaddr_storage *sa, socklen_t len, int backlog, int reuse) {
  int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1, zero = 0;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      (reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) ||
      (sa->ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0) ||
      bind(fd, (struct sockaddr *)sa, len) < 0 || listen(fd, backlog) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  /* accepted sockets inherit these on Linux: set once here */
  set_nodelay(fd);
  set_keepalive(fd);
  return fd;
}

/*
 * A socket per thread while listening sockets stay within a quarter of the descriptor limit (the
 * rest is for connections: up to 6 descriptors each), one shared socket past it.
 */
static int per_thread_sockets(void) {
  if (nthreads < 2) return 1; /* one thread: its own socket, as ever */
  struct rlimit rl;
  long limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 1L << 20;
  return __atomic_load_n(&listener_fds, __ATOMIC_RELAXED) + nthreads <= limit / 4;
}

static void do_listen(uint32_t lid, struct sockaddr_storage *sa, socklen_t len, int backlog) {
  int fds[MAX_THREADS];
  int n = 0, err = 0;
  int each = per_thread_sockets();
  int want = each ? nthreads : 1;
  for (; n < want; n++) {
    int fd = open_listener(sa, len, backlog, each && nthreads > 1);
    if (fd < 0) { err = -fd; break; }
    fds[n] = fd;
    if (n == 0) {
      struct sockaddr_storage bound;
      socklen_t bl = sizeof bound;
      if (getsockname(fd, (struct sockaddr *)&bound, &bl) < 0) { err = errno; n++; break; }
      /* port 0: the others join the port the first was given */
      if (sa->ss_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = ((struct sockaddr_in6 *)&bound)->sin6_port;
      else ((struct sockaddr_in *)sa)->sin_port = ((struct sockaddr_in *)&bound)->sin_port;
    }
  }
  if (err != 0) {
    for (int i = 0; i < n; i++) close(fds[i]);
    reply_listening(lid, err, 0);
    return;
  }
  __atomic_add_fetch(&listener_fds, want, __ATOMIC_RELAXED);
  for (int i = 0; i < nthreads; i++) {
    struct cmd m = {.type = 'L', .lid = lid, .fd = fds[each ? i : 0], .shared = (uint8_t)!each};
    push(&threads[i], &m);
    uint64_t one = 1;
    if (write(threads[i].wake, &one, sizeof one) < 0 && errno != EAGAIN) die("eventfd");
  }
  reply_listening(lid, 0, addr_port(sa));
}

/* One frame from Node; malformed frames are reported on stderr and skipped. */
static void command(const unsigned char *p, uint32_t n, int *touched) {
  const unsigned char *end = p + n;
  uint8_t type = p[0];
  p++;
  struct cmd m;
  memset(&m, 0, sizeof m);
  m.type = type;
  if (type == 'S' && n >= 17) {
    __atomic_store_n(&max_conns, (int)(get32(p) & 0x7fffffff), __ATOMIC_RELAXED);
    __atomic_store_n(&keepalive_ms, (int)(get32(p + 4) & 0x7fffffff), __ATOMIC_RELAXED);
    __atomic_store_n(&idle_ms, (int)(get32(p + 8) & 0x7fffffff), __ATOMIC_RELAXED);
    __atomic_store_n(&half_ms, (int)(get32(p + 12) & 0x7fffffff), __ATOMIC_RELAXED);
    return;
  }
  if (type == 'L' && n >= 12) {
    uint32_t lid = get32(p);
    uint16_t port = get16(p + 4);
    uint32_t backlog = get32(p + 6);
    if (get_addr(p + 10, end, port, &m.sa, &m.salen) < 0) { reply_listening(lid, EINVAL, 0); return; }
    do_listen(lid, &m.sa, m.salen, backlog > 65535 ? 65535 : (int)backlog);
    return;
  }
  if (type == 'P' && n >= 16) {
    m.lid = get32(p);
    uint32_t ti = p[4];
    m.epoch = get32(p + 5);
    m.timeout_ms = get32(p + 9);
    uint32_t count = get16(p + 13);
    const unsigned char *q = p + 15;
    if (ti >= (uint32_t)nthreads || count > RING) goto bad;
    m.picks = malloc((count ? count : 1) * sizeof *m.picks);
    if (m.picks == NULL) die("out of memory");
    for (uint32_t i = 0; i < count; i++) {
      struct sockaddr_storage sa;
      socklen_t len;
      if (end - q < 3 || get_addr(q + 2, end, get16(q), &sa, &len) < 0) { free(m.picks); goto bad; }
      memcpy(&m.picks[i].a, &sa, len);
      m.picks[i].len = len;
      q += 3 + q[2];
    }
    m.npicks = count;
    push(&threads[ti], &m);
    touched[ti] = 1;
    return;
  }
  if (type == 'X' && n >= 5) {
    m.lid = get32(p);
    m.left = malloc(sizeof *m.left);
    if (m.left == NULL) die("out of memory");
    *m.left = nthreads;
    for (int i = 0; i < nthreads; i++) { push(&threads[i], &m); touched[i] = 1; }
    return;
  }
bad:
  fprintf(stderr, "tcp-relay-helper: malformed frame type %u length %u\n", type, n);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  nthreads = cpus > 0 ? (int)cpus : 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--threads") == 0) nthreads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--max-connections") == 0) max_conns = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--out-max") == 0 && atol(argv[i + 1]) > 0) out_max = (size_t)atol(argv[i + 1]);
    else if (strcmp(argv[i], "--lazy-us") == 0 && atol(argv[i + 1]) >= 0) lazy_us = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--pipe-bytes") == 0 && atol(argv[i + 1]) >= 0)
      pipe_bytes = atol(argv[i + 1]) > (1L << 30) ? 1u << 30 : (uint32_t)atol(argv[i + 1]);
    else if (strcmp(argv[i], "--pipe-budget") == 0 && atol(argv[i + 1]) >= 0) pipe_budget = (size_t)atol(argv[i + 1]) + 1;
  }
  /* (stored + 1 while parsing, so 0 given stays apart from not given) */
  pipe_budget = pipe_budget > 0 ? pipe_budget - 1 : default_pipe_budget();
  while (pipe_bytes & (pipe_bytes - 1)) pipe_bytes &= pipe_bytes - 1; /* a power of two, as the kernel's */
  if (nthreads < 1) nthreads = 1;
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  /* a relayed connection holds up to 6 descriptors (2 sockets, 2 pipes): ask for the hard limit */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  int ofl = fcntl(1, F_GETFL);
  if (ofl < 0 || fcntl(1, F_SETFL, ofl | O_NONBLOCK) < 0) die("fcntl stdout");
  pthread_t wtid;
  if (pthread_create(&wtid, NULL, writer, NULL) != 0) die("pthread_create");
  static int wake_kind = K_WAKE, cmd_kind = K_CMD;
  for (int i = 0; i < nthreads; i++) {
    struct thread *t = &threads[i];
    t->index = i;
    t->ep = epoll_create1(EPOLL_CLOEXEC);
    t->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->ep < 0 || t->wake < 0) die("epoll/eventfd");
    if (pthread_mutex_init(&t->qlock, NULL) != 0) die("mutex");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &wake_kind};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, t->wake, &ev) < 0) die("epoll_ctl");
    /* Node opened descriptor 3 + i as this thread's command pipe */
    t->cmd_fd = 3 + i;
    int fl = fcntl(t->cmd_fd, F_GETFL);
    if (fl < 0 || fcntl(t->cmd_fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(t->cmd_fd, F_SETFD, FD_CLOEXEC) < 0)
      die("command pipe (descriptor 3 + thread)");
    t->cin = malloc(MAX_FRAME * 2);
    t->tbuf = malloc(PIPE_CHUNK);
    if (t->cin == NULL || t->tbuf == NULL) die("out of memory");
    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = &cmd_kind};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, t->cmd_fd, &cev) < 0) die("epoll_ctl");
  }
  for (int i = 0; i < nthreads; i++) {
    if (pthread_create(&threads[i].tid, NULL, loop, &threads[i]) != 0) die("pthread_create");
  }
  {
    struct buf b = {0};
    size_t at = frame_begin(&b, 'H');
    put32(&b, (uint32_t)nthreads);
    put32(&b, (uint32_t)max_conns);
    frame_end(&b, at);
    flush(&b);
    free(b.p);
  }
  unsigned char *in = malloc(MAX_FRAME * 2);
  if (in == NULL) die("out of memory");
  size_t have = 0;
  int touched[MAX_THREADS];
  for (;;) {
    ssize_t n = read(0, in + have, MAX_FRAME * 2 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0); /* Node closed our stdin or died: every socket goes with us */
    have += (size_t)n;
    memset(touched, 0, sizeof touched);
    size_t off = 0;
    while (have - off >= 4) {
      uint32_t len = get32(in + off);
      if (len == 0 || len > MAX_FRAME) {
        fprintf(stderr, "tcp-relay-helper: frame length %u out of range\n", len);
        _exit(3);
      }
      if (have - off - 4 < len) break;
      command(in + off + 4, len, touched);
      off += 4 + len;
    }
    memmove(in, in + off, have - off);
    have -= off;
    for (int i = 0; i < nthreads; i++) {
      uint64_t one = 1;
      if (touched[i] && write(threads[i].wake, &one, sizeof one) < 0 && errno != EAGAIN) die("eventfd");
    }
  }
}
