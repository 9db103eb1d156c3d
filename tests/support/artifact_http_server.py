#!/usr/bin/env python3
"""A static web server for the artifact repository tests: serves ROOT on 127.0.0.1 (an ephemeral
port, printed first as 'PORT <n>'), one log line per request ('GET <path>'), and misbehaves on
demand for paths containing --fault-path:

  stall      never answers (the client must time out, not hang)
  truncate   announces more bytes than it sends, then closes (a truncated body)
  hang-half  sends half the body, then waits (the test kills the server mid-download)

usage: artifact_http_server.py ROOT [--fault stall|truncate|hang-half] [--fault-path TEXT]
"""
import argparse
import functools
import http.server
import os
import sys
import time


class Handler(http.server.SimpleHTTPRequestHandler):
    fault = None
    fault_path = ""

    def log_message(self, fmt, *args):  # one line per request, on stdout
        pass

    def do_GET(self):
        print(f"GET {self.path}", flush=True)
        if self.fault and self.fault_path in self.path:
            local = self.translate_path(self.path)
            body = open(local, "rb").read() if os.path.isfile(local) else b""
            if self.fault == "stall":
                time.sleep(3600)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body) + (1000 if self.fault == "truncate" else 0)))
            self.end_headers()
            if self.fault == "truncate":
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            time.sleep(3600)
            return
        super().do_GET()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--fault", choices=["stall", "truncate", "hang-half"])
    parser.add_argument("--fault-path", default="")
    args = parser.parse_args()
    Handler.fault = args.fault
    Handler.fault_path = args.fault_path
    handler = functools.partial(Handler, directory=args.root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
