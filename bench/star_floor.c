/*
 * star_floor.c: the floor of a star's small collectives on this host, for
 * comparison with starcomm (docs/performance.md, "Where the time of a
 * small collective goes"; bench/compare-mpi.sh runs it in its rounds and
 * prints it under its table). R processes on 127.0.0.1; rank 0 accepts the others; every socket
 * non-blocking with TCP_NODELAY; waiting is a read per link and a
 * sched_yield per empty round, nothing else (no framing checks, deadlines
 * or failure handling).
 *
 *   gcc -O2 -o star_floor bench/star_floor.c
 *   ./star_floor R N            # N back-to-back barriers (5-byte frames)
 *   ./star_floor R N BYTES      # N broadcasts of BYTES from rank R-1
 *                               # through rank 0, an untimed barrier after each
 *
 * Each rank prints the median, 10th and 90th percentile of its N times in
 * microseconds; rank 0 then prints the median over the N repetitions of
 * the slowest rank's time, the figure starbench reports (the workers send
 * their times to rank 0 after the last repetition).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 64

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void die(const char *what) {
	perror(what);
	exit(2);
}

/* readn reads exactly n bytes, yielding while nothing has arrived. */
static void readn(int fd, char *b, int n) {
	for (int h = 0; h < n;) {
		int k = read(fd, b + h, n - h);
		if (k > 0)
			h += k;
		else if (k == 0) {
			fprintf(stderr, "star_floor: peer closed\n");
			exit(3);
		} else if (errno == EAGAIN)
			sched_yield();
		else if (errno != EINTR)
			die("read");
	}
}

/* writen writes exactly n bytes, yielding while the socket is full. */
static void writen(int fd, const char *b, int n) {
	for (int h = 0; h < n;) {
		int k = write(fd, b + h, n - h);
		if (k > 0)
			h += k;
		else if (errno == EAGAIN)
			sched_yield();
		else if (errno != EINTR)
			die("write");
	}
}

/* barrier: every worker sends 5 bytes to rank 0, which polls its links in
 * turn (yielding after an empty round) and then answers each. */
static void barrier(int rank, int R, int *fds, char *buf) {
	if (rank != 0) {
		writen(fds[0], buf, 5);
		readn(fds[0], buf, 5);
		return;
	}
	int got[MAXR] = {0}, left = R - 1;
	while (left > 0) {
		for (int r = 1; r < R; r++) {
			if (got[r])
				continue;
			int k = read(fds[r], buf, 5);
			if (k > 0) {
				if (k < 5)
					readn(fds[r], buf + k, 5 - k);
				got[r] = 1;
				left--;
			} else if (k == 0) {
				fprintf(stderr, "star_floor: rank %d closed\n", r);
				exit(3);
			} else if (errno != EAGAIN && errno != EINTR)
				die("read");
		}
		if (left > 0)
			sched_yield();
	}
	for (int r = 1; r < R; r++)
		writen(fds[r], buf, 5);
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: star_floor R N [BYTES]\n");
		return 2;
	}
	int R = atoi(argv[1]), N = atoi(argv[2]), size = argc > 3 ? atoi(argv[3]) : 0;
	if (R < 2 || R > MAXR || N < 1 || size < 0 || size > (1 << 20)) {
		fprintf(stderr, "star_floor: need 2 <= R <= %d, N >= 1, 0 <= BYTES <= 1 MiB\n", MAXR);
		return 2;
	}
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		die("socket");
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	if (bind(ls, (void *)&a, sizeof a) < 0 || listen(ls, MAXR) < 0 || getsockname(ls, (void *)&a, &al) < 0)
		die("listen");
	int rank = 0;
	for (int r = 1; r < R; r++)
		if (fork() == 0) {
			rank = r;
			break;
		}
	int fds[MAXR];
	if (rank == 0) {
		for (int r = 1; r < R; r++) {
			int f = accept(ls, 0, 0), who = 0;
			if (f < 0 || read(f, &who, sizeof who) != sizeof who || who < 1 || who >= R)
				die("accept");
			fds[who] = f;
		}
	} else {
		int f = socket(AF_INET, SOCK_STREAM, 0);
		while (connect(f, (void *)&a, sizeof a) < 0)
			usleep(1000);
		if (write(f, &rank, sizeof rank) != sizeof rank)
			die("write");
		fds[0] = f;
	}
	for (int r = 0; r < R; r++) {
		if ((rank == 0 && r == 0) || (rank != 0 && r != 0))
			continue;
		setsockopt(fds[r], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		fcntl(fds[r], F_SETFL, O_NONBLOCK);
	}
	char *buf = calloc(1, (size_t)size + 5);
	double *t = malloc(sizeof(double) * N);
	if (!buf || !t)
		die("malloc");
	for (int i = 0; i < N; i++) {
		double s = now_us();
		if (size == 0)
			barrier(rank, R, fds, buf);
		else if (rank == R - 1)
			writen(fds[0], buf, size);
		else if (rank == 0) {
			readn(fds[R - 1], buf, size);
			for (int r = 1; r < R - 1; r++)
				writen(fds[r], buf, size);
		} else
			readn(fds[0], buf, size);
		t[i] = now_us() - s;
		if (size > 0)
			barrier(rank, R, fds, buf);
	}
	double *slow = malloc(sizeof(double) * N);
	if (!slow)
		die("malloc");
	memcpy(slow, t, sizeof(double) * N);
	if (rank != 0)
		writen(fds[0], (char *)t, (int)(sizeof(double) * N));
	else {
		double *w = malloc(sizeof(double) * N);
		if (!w)
			die("malloc");
		for (int r = 1; r < R; r++) {
			readn(fds[r], (char *)w, (int)(sizeof(double) * N));
			for (int i = 0; i < N; i++)
				if (w[i] > slow[i])
					slow[i] = w[i];
		}
		free(w);
	}
	qsort(t, N, sizeof(double), cmp);
	qsort(slow, N, sizeof(double), cmp);
	printf("rank %d median %.1f us p10 %.1f p90 %.1f\n", rank, t[N / 2], t[N / 10], t[N * 9 / 10]);
	fflush(stdout);
	if (rank == 0) {
		while (wait(0) > 0)
			;
		printf("slowest rank per repetition: median %.1f us p10 %.1f p90 %.1f\n", slow[N / 2], slow[N / 10], slow[N * 9 / 10]);
	}
	return 0;
}
