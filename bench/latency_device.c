/*
 * latency_device.c
 *		A file whose every read and write takes a fixed time, for emulating
 *		a cloud volume in benchmarks (see cloud_device.sh).
 *
 * A FUSE file system with one file, "disk", backed by an ordinary file.
 * Each request is answered no earlier than LATENCY after the daemon got it,
 * however long the backing file took (under LATENCY), so a request costs
 * about LATENCY plus FUSE's round trip at any queue depth.  Requests are
 * served by up to THREADS threads at once, each sleeping until its
 * request's deadline; the kernel's limit of background requests per
 * connection is raised to match, because a loop device with direct I/O on
 * the file sends all its requests as background (asynchronous) ones.
 *
 * nbdkit's delay filter behind nbdfuse would do the same, but nbdfuse runs
 * libfuse's loop with its default of 10 threads, which caps a 1ms device at
 * under 10k requests per second at any depth.
 *
 *	  latency_device BACKING MOUNTPOINT READ_US WRITE_US THREADS
 *
 * The daemon stays in the foreground; unmount with fusermount3 -u.
 * Flushes and fsyncs take WRITE_US and make nothing durable: the device
 * emulates latency, not power loss.
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DISK_INO 2
#define DISK_NAME "disk"

static int	backing_fd;
static off_t disk_size;
static long read_ns;
static long write_ns;
static unsigned threads;

static struct timespec
deadline_after(long ns)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_nsec += ns;
	t.tv_sec += t.tv_nsec / 1000000000L;
	t.tv_nsec %= 1000000000L;
	return t;
}

static void
wait_until(const struct timespec *t)
{
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR)
		;
}

static void
fill_attr(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID)
	{
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	}
	else
	{
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = disk_size;
	}
}

static void
dev_init(void *userdata, struct fuse_conn_info *conn)
{
	(void) userdata;
	conn->max_background = threads;
	conn->congestion_threshold = threads * 3 / 4;
}

static void
dev_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID || strcmp(name, DISK_NAME) != 0)
	{
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = DISK_INO;
	e.attr_timeout = 3600;
	e.entry_timeout = 3600;
	fill_attr(DISK_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void
dev_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void) fi;
	if (ino != FUSE_ROOT_ID && ino != DISK_INO)
	{
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_attr(ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void
dev_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != DISK_INO)
	{
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void
dev_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	struct timespec due = deadline_after(read_ns);
	char	   *buf = malloc(size);
	ssize_t		n;

	(void) ino;
	(void) fi;
	if (buf == NULL)
	{
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = pread(backing_fd, buf, size, off);
	wait_until(&due);
	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_buf(req, buf, n);
	free(buf);
}

static void
dev_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		  off_t off, struct fuse_file_info *fi)
{
	struct timespec due = deadline_after(write_ns);
	ssize_t		n;

	(void) ino;
	(void) fi;
	if (off >= disk_size)
	{
		n = -1;
		errno = ENOSPC;
	}
	else
	{
		if (off + (off_t) size > disk_size)
			size = (size_t) (disk_size - off);
		n = pwrite(backing_fd, buf, size, off);
	}
	wait_until(&due);
	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_write(req, n);
}

static void
dev_sync(fuse_req_t req)
{
	struct timespec due = deadline_after(write_ns);

	wait_until(&due);
	fuse_reply_err(req, 0);
}

static void
dev_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		  struct fuse_file_info *fi)
{
	(void) ino;
	(void) datasync;
	(void) fi;
	dev_sync(req);
}

static void
dev_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void) ino;
	(void) fi;
	fuse_reply_err(req, 0);
}

static void
dev_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	char		buf[512];
	size_t		len = 0;
	struct stat st;

	(void) fi;
	if (ino != FUSE_ROOT_ID)
	{
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (off == 0)
	{
		fill_attr(DISK_INO, &st);
		len = fuse_add_direntry(req, buf, sizeof(buf), DISK_NAME, &st, 1);
		if (len > size)
			len = 0;
	}
	fuse_reply_buf(req, buf, len);
}

static const struct fuse_lowlevel_ops dev_ops = {
	.init = dev_init,
	.lookup = dev_lookup,
	.getattr = dev_getattr,
	.open = dev_open,
	.read = dev_read,
	.write = dev_write,
	.flush = dev_flush,
	.fsync = dev_fsync,
	.readdir = dev_readdir,
};

int
main(int argc, char **argv)
{
	char	   *fuse_argv[] = {argv[0], "-o", "allow_other", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
	struct fuse_session *se;
	struct fuse_loop_config *config;
	struct stat st;
	int			rc;

	if (argc != 6)
	{
		fprintf(stderr, "usage: %s BACKING MOUNTPOINT READ_US WRITE_US THREADS\n",
				argv[0]);
		return 2;
	}
	backing_fd = open(argv[1], O_RDWR);
	if (backing_fd < 0 || fstat(backing_fd, &st) != 0)
	{
		fprintf(stderr, "%s: cannot open \"%s\": %s\n", argv[0], argv[1],
				strerror(errno));
		return 1;
	}
	disk_size = st.st_size;
	read_ns = atol(argv[3]) * 1000L;
	write_ns = atol(argv[4]) * 1000L;
	threads = (unsigned) atoi(argv[5]);
	if (read_ns < 0 || write_ns < 0 || threads < 1)
	{
		fprintf(stderr, "%s: latencies must be >= 0 and THREADS >= 1\n", argv[0]);
		return 2;
	}

	se = fuse_session_new(&args, &dev_ops, sizeof(dev_ops), NULL);
	if (se == NULL || fuse_set_signal_handlers(se) != 0 ||
		fuse_session_mount(se, argv[2]) != 0)
		return 1;
	config = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(config, threads);
	fuse_loop_cfg_set_idle_threads(config, threads);
	fuse_loop_cfg_set_clone_fd(config, 1);
	rc = fuse_session_loop_mt(se, config);
	fuse_loop_cfg_destroy(config);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc == 0 ? 0 : 1;
}
