#!/bin/sh
# Runs inside the test VM (a stock kernel with BPF trampolines), chrooted into the host's root
# (read-only over 9p): `latscope stack` with its fentry/fexit hooks, receive and transmit, under
# latscope rr traffic on loopback. Results go to the console as LSVM-* lines for tests/integration/stack_fentry_vm.rs.
L=$1
N=$2
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
echo "LSVM-KERNEL $(uname -r)"
"$L" serve --bind 127.0.0.1 -p 7373 -q 2>/dev/null &
S=$!
"$L" stack --json >/run/stack.json 2>/run/stack.err &
K=$!
# Loading is slow under emulation: wait (bounded) until every probe is attached.
i=0
while ! grep -q attached /run/stack.err && kill -0 $K 2>/dev/null && [ $i -lt 1200 ]; do
  sleep 0.1
  i=$((i + 1))
done
echo "LSVM-ATTACHED-AFTER-DS $i"
"$L" rr 127.0.0.1 --udp -n "$N" >/dev/null 2>&1
echo "LSVM-RR-UDP $?"
"$L" rr 127.0.0.1 -n "$N" >/dev/null 2>&1
echo "LSVM-RR-TCP $?"
# Other processes' sockets during a connection. The VM has no modules for its kernel beyond the
# initramfs's, so sock_diag has no tcp/udp handler: the listing must come from /proc/net.
"$L" rr 127.0.0.1 -d 4s >/dev/null 2>&1 &
R=$!
sleep 2
"$L" sockets --port 7373 --json >/run/sockets.json 2>/run/sockets.err
echo "LSVM-SOCKETS-EXIT $?"
echo "LSVM-SOCKETS-JSON $(tr -d '\n' </run/sockets.json)"
wait $R
kill -INT $K
wait $K
echo "LSVM-STACK-EXIT $?"
echo "LSVM-STDERR $(tr '\n' ' ' </run/stack.err)"
echo "LSVM-JSON $(tr -d '\n' </run/stack.json)"
# The same hooks with both address filters on (another code path in every program): they must
# load on fentry too, and count the loopback rr's packets.
"$L" stack --laddr 127.0.0.1 --raddr 127.0.0.1 --json >/run/fstack.json 2>/run/fstack.err &
F=$!
i=0
while ! grep -q attached /run/fstack.err && kill -0 $F 2>/dev/null && [ $i -lt 1200 ]; do
  sleep 0.1
  i=$((i + 1))
done
"$L" rr 127.0.0.1 -n "$N" >/dev/null 2>&1
kill -INT $F
wait $F
echo "LSVM-FSTACK-EXIT $?"
echo "LSVM-FJSON $(tr -d '\n' </run/fstack.json)"
# The transmit stages: the write's and IP output's boundaries on fentry, the device layer on its
# tracepoints, under the same loopback rr.
"$L" stack --direction tx --json >/run/txstack.json 2>/run/txstack.err &
T=$!
i=0
while ! grep -q attached /run/txstack.err && kill -0 $T 2>/dev/null && [ $i -lt 1200 ]; do
  sleep 0.1
  i=$((i + 1))
done
"$L" rr 127.0.0.1 --udp -n "$N" >/dev/null 2>&1
"$L" rr 127.0.0.1 -n "$N" >/dev/null 2>&1
kill -INT $T
wait $T
echo "LSVM-TXSTACK-EXIT $?"
echo "LSVM-TXSTDERR $(tr '\n' ' ' </run/txstack.err)"
echo "LSVM-TXJSON $(tr -d '\n' </run/txstack.json)"
kill $S
wait $S 2>/dev/null
echo "LSVM-LEFT $(bpftool prog list | grep -c lsstk_)"
