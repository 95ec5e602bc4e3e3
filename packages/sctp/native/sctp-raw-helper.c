/*
 * sctp-raw-helper: bridges raw IPv4 sockets of protocol 132 (SCTP) to the Node process that spawned
 * it, over stdin/stdout with length-prefixed frames. Node 20 has no raw sockets, so the raw SCTP
 * transport of @userspace-proxy/sctp runs this small program (as root) and keeps the whole SCTP
 * stack, including the CRC32c and chunk-bounds guard, in TypeScript. The program only moves bytes:
 * it never parses SCTP beyond the IP header it strips.
 *
 * Frame: u32 length of what follows (big-endian), u8 type, body. Integers are big-endian; IPv4
 * addresses are their 4 network-order bytes.
 *   Node -> helper                         helper -> Node
 *   'O' u32 id, addr      open a socket    'H' i32 err             hello (a probe socket worked)
 *   'C' u32 id            close it         'o' u32 id, i32 err     answer to 'O'
 *   'S' u32 id, dst, pkt  send pkt         'P' u32 id, src, pkt    a packet for socket id
 *   'R' u32 req, dst      route lookup     'r' u32 req, i32 err, src   answer to 'R'
 *                                          'e' u32 id, i32 err     a send failed
 * A socket opened on 0.0.0.0 is unbound and receives every SCTP packet of the network namespace;
 * packets for an address another socket here is bound to are left to that socket.
 * The helper exits when stdin closes, on a malformed frame, or when its parent dies.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROTO_SCTP 132
#define MAX_SOCKETS 4096
#define MAX_FRAME (65536 + 16)
#define IN_CAP (1 << 20)
#define OUT_FLUSH (256 * 1024)
#define OUT_CAP (OUT_FLUSH + MAX_FRAME)
#define BATCH 64
#define SOCK_BUF (4 << 20)

struct slot {
  int fd; /* -1 when free */
  uint32_t id;
  uint32_t addr; /* network order; 0 = wildcard */
};

static struct slot slots[MAX_SOCKETS];
static int nslots;
static int ep;
static unsigned char inbuf[IN_CAP];
static size_t inlen;
static unsigned char outbuf[OUT_CAP];
static size_t outlen;
static unsigned char pkt[65536];

static void put32(unsigned char *p, uint32_t v) {
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

static uint32_t get32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void flush_out(void) {
  size_t off = 0;
  while (off < outlen) {
    ssize_t n = write(1, outbuf + off, outlen - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      exit(0); /* the parent is gone */
    }
    off += (size_t)n;
  }
  outlen = 0;
}

/* Appends a frame: type, then up to three 32-bit fields, then `data`. */
static void emit(unsigned char type, const uint32_t *fields, int nfields, const void *data,
                 size_t len) {
  size_t body = 1 + 4 * (size_t)nfields + len;
  if (outlen + 4 + body > OUT_CAP) flush_out();
  unsigned char *p = outbuf + outlen;
  put32(p, (uint32_t)body);
  p[4] = type;
  for (int i = 0; i < nfields; i++) put32(p + 5 + 4 * i, fields[i]);
  if (len) memcpy(p + 5 + 4 * nfields, data, len);
  outlen += 4 + body;
  if (outlen >= OUT_FLUSH) flush_out();
}

static struct slot *find(uint32_t id) {
  for (int i = 0; i < nslots; i++)
    if (slots[i].fd >= 0 && slots[i].id == id) return &slots[i];
  return NULL;
}

static int bound_elsewhere(uint32_t addr) {
  for (int i = 0; i < nslots; i++)
    if (slots[i].fd >= 0 && slots[i].addr == addr) return 1;
  return 0;
}

static int open_raw(uint32_t addr) {
  int fd = socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, PROTO_SCTP);
  if (fd < 0) return -errno;
  int size = SOCK_BUF;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size) < 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  if (addr != 0) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = addr;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
  }
  return fd;
}

static void do_open(uint32_t id, uint32_t addr) {
  uint32_t f[2] = {id, 0};
  int idx = -1;
  for (int i = 0; i < nslots; i++)
    if (slots[i].fd < 0) {
      idx = i;
      break;
    }
  if (find(id) != NULL) {
    f[1] = (uint32_t)EEXIST;
  } else if (idx < 0 && nslots == MAX_SOCKETS) {
    f[1] = (uint32_t)EMFILE;
  } else {
    int fd = open_raw(addr);
    if (fd < 0) {
      f[1] = (uint32_t)(-fd);
    } else {
      if (idx < 0) idx = nslots++;
      slots[idx].fd = fd;
      slots[idx].id = id;
      slots[idx].addr = addr;
      struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)idx + 1};
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
  }
  emit('o', f, 2, NULL, 0);
}

static void do_close(uint32_t id) {
  struct slot *s = find(id);
  if (s == NULL) return;
  epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
  close(s->fd);
  s->fd = -1;
}

static void do_send(uint32_t id, uint32_t dst, const unsigned char *data, size_t len) {
  struct slot *s = find(id);
  int err = 0;
  if (s == NULL) {
    err = EBADF;
  } else {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = dst;
    if (sendto(s->fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&sa, sizeof sa) < 0)
      err = errno;
  }
  if (err != 0) {
    uint32_t f[2] = {id, (uint32_t)err};
    emit('e', f, 2, NULL, 0);
  }
}

/* The source address the kernel would pick for `dst`: a connected UDP socket's local address. */
static void do_route(uint32_t req, uint32_t dst) {
  uint32_t f[2] = {req, 0};
  uint32_t src = 0;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9)};
  sa.sin_addr.s_addr = dst;
  socklen_t sl = sizeof sa;
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
    f[1] = (uint32_t)errno;
  } else {
    src = sa.sin_addr.s_addr;
  }
  if (fd >= 0) close(fd);
  emit('r', f, 2, &src, 4);
}

/* One frame from Node; 0 when it is malformed. */
static int handle(const unsigned char *p, size_t len) {
  if (len < 1) return 0;
  unsigned char type = p[0];
  p++;
  len--;
  uint32_t a4;
  switch (type) {
    case 'O':
      if (len != 8) return 0;
      memcpy(&a4, p + 4, 4);
      do_open(get32(p), a4);
      return 1;
    case 'C':
      if (len != 4) return 0;
      do_close(get32(p));
      return 1;
    case 'S':
      if (len < 8) return 0;
      memcpy(&a4, p + 4, 4);
      do_send(get32(p), a4, p + 8, len - 8);
      return 1;
    case 'R':
      if (len != 8) return 0;
      memcpy(&a4, p + 4, 4);
      do_route(get32(p), a4);
      return 1;
    default:
      return 0;
  }
}

static void read_stdin(void) {
  ssize_t n = read(0, inbuf + inlen, IN_CAP - inlen);
  if (n == 0) {
    flush_out();
    exit(0);
  }
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return;
    exit(1);
  }
  inlen += (size_t)n;
  size_t off = 0;
  while (inlen - off >= 4) {
    uint32_t flen = get32(inbuf + off);
    if (flen > MAX_FRAME) {
      fprintf(stderr, "sctp-raw-helper: frame of %u bytes\n", flen);
      exit(2);
    }
    if (inlen - off - 4 < flen) break;
    if (!handle(inbuf + off + 4, flen)) {
      fprintf(stderr, "sctp-raw-helper: malformed frame\n");
      exit(2);
    }
    off += 4 + flen;
  }
  memmove(inbuf, inbuf + off, inlen - off);
  inlen -= off;
}

static void read_raw(struct slot *s) {
  for (int i = 0; i < BATCH; i++) {
    ssize_t n = recv(s->fd, pkt, sizeof pkt, MSG_DONTWAIT);
    if (n < 0) return; /* EAGAIN, or an error the next read reports again */
    if (n < 20) continue;
    size_t ihl = (size_t)(pkt[0] & 0x0f) * 4;
    if ((pkt[0] >> 4) != 4 || ihl < 20 || (size_t)n < ihl || pkt[9] != PROTO_SCTP) continue;
    uint32_t src, dst;
    memcpy(&src, pkt + 12, 4);
    memcpy(&dst, pkt + 16, 4);
    if (s->addr == 0 ? bound_elsewhere(dst) : dst != s->addr) continue;
    uint32_t f[2] = {s->id, 0};
    size_t len = (size_t)n - ihl;
    /* id, then the source address as the second field's bytes, then the SCTP packet */
    memcpy(&f[1], &src, 4);
    f[1] = ntohl(f[1]);
    emit('P', f, 2, pkt + ihl, len);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int probe = socket(AF_INET, SOCK_RAW, PROTO_SCTP);
  int32_t hello = probe < 0 ? errno : 0;
  if (probe >= 0) close(probe);
  uint32_t hf[1] = {(uint32_t)hello};
  emit('H', hf, 1, NULL, 0);
  flush_out();
  if (hello != 0) return 3;
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev) < 0) return 4;
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 5;
    }
    for (int i = 0; i < n; i++) {
      uint32_t k = evs[i].data.u32;
      if (k == 0) {
        read_stdin();
      } else if (k - 1 < (uint32_t)nslots && slots[k - 1].fd >= 0) {
        read_raw(&slots[k - 1]);
      }
    }
    flush_out();
  }
}
