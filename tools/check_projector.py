#!/usr/bin/python3
"""Reads the folder `embed --format tensorboard` wrote with TensorBoard's own
projector plugin (tensorboard.plugins.projector.projector_plugin), through
the HTTP routes its frontend calls, and checks what it serves:

    python3 tools/check_projector.py DIR [--npy EMB.npy]

  /runs          the folder's run "." has a projector
  /info          one embedding "embeddings" of shape (N, D), with the
                 metadata and sprite paths of the config
  /tensor        N x D float32; with --npy (the same model and images
                 embedded with --format npy), equal to it within the %.7g
                 text's rounding (relative 1e-6)
  /metadata      a "filename<TAB>folder" header and N rows (with --npy:
                 the names of EMB.npy.filenames.txt, in order)
  /sprite_image  a PNG of ceil(sqrt(N)) x cell columns (Pillow decodes it)

Needs tensorboard, numpy and Pillow (pip); make test does not run it, its
own tests/test_projector.c checks the files' structure without Python.
Exits 1 with the first difference.
"""
import argparse
import io
import json
import math
import sys

import numpy as np
from PIL import Image
from werkzeug.test import Client
from werkzeug.wrappers import Response

from tensorboard.backend.event_processing import data_provider as provider_lib
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.projector import projector_plugin


def fail(message):
    print(f"check_projector: {message}", file=sys.stderr)
    sys.exit(1)


def plugin_client(logdir):
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    provider = provider_lib.MultiplexerDataProvider(multiplexer, logdir)
    context = base_plugin.TBContext(logdir=logdir, data_provider=provider,
                                    multiplexer=multiplexer)
    plugin = projector_plugin.ProjectorPlugin(context)
    plugin._update_configs()  # what is_active() runs in its thread
    routes = plugin.get_plugin_apps()

    def app(environ, start_response):
        route = routes.get(environ["PATH_INFO"])
        if route is None:
            return Response("no route", status=404)(environ, start_response)
        return route(environ, start_response)

    return Client(app, Response)


def get(client, route, **args):
    response = client.get(route, query_string=args)
    if response.status_code != 200:
        fail(f"{route} {args}: HTTP {response.status_code}: {response.get_data(as_text=True)}")
    return response.get_data()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--npy", help="the same embeddings written with --format npy")
    args = parser.parse_args()
    client = plugin_client(args.dir)

    runs = json.loads(get(client, "/runs"))
    if runs != ["."]:
        fail(f"/runs is {runs}, expected ['.']")
    info = json.loads(get(client, "/info", run="."))
    embeddings = info.get("embeddings", [])
    if len(embeddings) != 1 or embeddings[0].get("tensorName") != "embeddings":
        fail(f"/info embeddings: {embeddings}")
    rows, dim = (int(v) for v in embeddings[0]["tensorShape"])

    tensor = np.frombuffer(get(client, "/tensor", run=".", name="embeddings"), dtype=np.float32)
    if tensor.size != rows * dim:
        fail(f"/tensor holds {tensor.size} floats, the config says {rows} x {dim}")
    tensor = tensor.reshape(rows, dim)
    lines = get(client, "/metadata", run=".", name="embeddings").decode().splitlines()
    if lines[0] != "filename\tfolder" or len(lines) != rows + 1:
        fail(f"/metadata: header {lines[0]!r}, {len(lines) - 1} rows for {rows} points")
    for line in lines[1:]:
        name, folder = line.split("\t")
        expected_folder = name.rsplit("/", 1)[0] if "/" in name else "."
        if folder != expected_folder:
            fail(f"/metadata: {name!r} has folder {folder!r}")

    if args.npy:
        reference = np.load(args.npy)
        if reference.shape != tensor.shape:
            fail(f"{args.npy} is {reference.shape}, the projector's tensor {tensor.shape}")
        scale = np.maximum(np.abs(reference), 1e-30)
        worst = float(np.max(np.abs(tensor - reference) / scale))
        if worst > 1e-6:
            fail(f"/tensor differs from {args.npy} by up to {worst:.3g} (relative)")
        with open(args.npy + ".filenames.txt") as names:
            expected = names.read().splitlines()
        if [line.split("\t")[0] for line in lines[1:]] != expected:
            fail("/metadata names differ from the npy's filenames")

    sprite = Image.open(io.BytesIO(get(client, "/sprite_image", run=".", name="embeddings")))
    cell = int(embeddings[0]["sprite"]["singleImageDim"][0])
    columns = math.ceil(math.sqrt(rows))
    expected_size = (columns * cell, math.ceil(rows / columns) * cell)
    if sprite.size != expected_size:
        fail(f"sprite {sprite.size}, expected {expected_size} ({columns} cells of {cell} px)")
    print(f"check_projector: ok, {rows} points x {dim} dims, metadata {len(lines) - 1} rows, "
          f"sprite {sprite.size[0]}x{sprite.size[1]} ({cell} px cells), read by tensorboard "
          f"{__import__('tensorboard').__version__}'s projector plugin")


if __name__ == "__main__":
    main()
