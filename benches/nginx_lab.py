"""A private nginx on loopback for the HTTP benchmarks (http_vs_wrk.sh, tui_overhead.sh): its own
prefix in a temp directory, a free port, nginx's default page size, one worker per core, no access
log. `cpu_s()` is the CPU time nginx has used so far (to charge each client run the server CPU
its requests cost). `stop()` ends it and removes the directory; SIGTERM to the benchmark does the same."""
import os, shutil, signal, socket, subprocess, tempfile, time


class Nginx:
    def __init__(self, binary, prefix):
        self.dir = d = tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-")
        for sub in ("html", "logs", "tmp"):
            os.makedirs(f"{d}/{sub}")
        with open(f"{d}/html/index.html", "w") as f:
            f.write("a" * 612)  # the size of nginx's default page
        s = socket.socket(); s.bind(("127.0.0.1", 0)); self.port = s.getsockname()[1]; s.close()
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(f"""daemon off; user root; worker_processes auto; pid {d}/nginx.pid; error_log {d}/logs/error.log;
events {{ worker_connections 8192; }}
http {{ access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{ listen 127.0.0.1:{self.port} backlog=4096; root {d}/html; }} }}
""")
        self.proc = subprocess.Popen([binary, "-p", d, "-c", f"{d}/nginx.conf"])
        signal.signal(signal.SIGTERM, lambda *a: (self.stop(), os._exit(1)))
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close(); break
            except OSError:
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/"

    def cpu_s(self):
        """User+system CPU seconds nginx has used so far: the master and its live workers."""
        tick = os.sysconf("SC_CLK_TCK")
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pids = [pid] + [int(c) for c in f.read().split()]
        except OSError:
            return 0.0
        total = 0
        for p in pids:
            try:
                with open(f"/proc/{p}/stat") as f:
                    v = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a worker that just exited
            total += int(v[11]) + int(v[12])
        return total / tick

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try: self.proc.wait(5)
        except subprocess.TimeoutExpired: self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
