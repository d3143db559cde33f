// What the Node client tests share: start the real `fak serve` on a free port (keys in an
// environment variable), and run named checks that report "ok" / "FAIL" and count failures.
import { spawn } from "node:child_process";

// Resolves {proc, url} once the server prints its "listening on" line; rejects if it exits first.
export function startServer(fak, keys, extraArgs = []) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, FAK_CLIENT_TEST_KEYS: keys, OMP_WAIT_POLICY: "PASSIVE" };
    const proc = spawn(fak, ["serve", "--port", "0", "-t", "1", "--api-key-env", "FAK_CLIENT_TEST_KEYS",
                             ...extraArgs],
                       { env, stdio: ["ignore", "inherit", "pipe"] });
    let err = "";
    const timer = setTimeout(() => reject(new Error("fak serve did not start: " + err)), 20000);
    proc.stderr.on("data", (d) => {
      err += d.toString();
      const m = err.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1] });
      }
    });
    proc.on("exit", (code) => reject(new Error(`fak serve exited with ${code}: ${err}`)));
  });
}

export function makeChecker() {
  const state = { failed: 0 };
  state.check = async (name, fn) => {
    try {
      await fn();
      console.log("ok   " + name);
    } catch (e) {
      state.failed++;
      console.log("FAIL " + name + ": " + (e.stack || e));
    }
  };
  return state;
}
