"""The ``tools-image`` plugin: ``read_image``, an image file shown to the model.

The file is opened as the file tools open theirs (:mod:`.confine`, :mod:`.safeopen`):
beneath the workspace root, never through a swapped symlink, a regular file only, and its
bytes (at most ``max_file_bytes``) are read once and decoded from memory.
Its format is detected from its content by Pillow, never from its name, and only PNG,
JPEG, WebP and GIF are accepted: the formats vision models take. An image within both
bounds of the row (longest side ``max_side`` pixels, ``max_bytes`` bytes) is sent as it
is; a larger one is scaled down (aspect kept, EXIF rotation applied) and re-encoded, PNG
when it has transparency and JPEG otherwise, stepping quality and then size down until it
fits. An animated GIF is sent as its first frame.

The image reaches the model as an image block of the tool result, which only a route
that takes images can carry (``supports_images`` on the provider row); on any other route
the tool answers an error saying so before reading anything. Pillow is imported on the
first call, so a profile that never reads an image never loads it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from dsh._version import __version__
from dsh.runtime.kernel.plugin import Capability, Manifest, Plugin, Registrar
from dsh.runtime.tools import confine, safeopen
from dsh.runtime.tools.base import Image, ToolContext, ToolResult

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
"""Pillow format name → media type, for the formats read_image accepts."""
MAX_PIXELS = 64_000_000
"""Images with more pixels are refused before decoding (decompression bombs)."""
JPEG_QUALITIES = (85, 70, 55)
SHRINK = 0.75
"""Factor the longest side shrinks by when the lowest quality is still too large."""
MIN_SIDE = 64


class ImageError(Exception):
    """The image cannot be sent; the message is written for the model."""


class Prepared(NamedTuple):
    """An image ready to send, and what to tell the model about it."""

    media_type: str
    data: bytes
    summary: str


def prepare(raw: bytes, name: str, *, max_side: int, max_bytes: int) -> Prepared:
    """Decode the image file's bytes ``raw`` and bring it within ``max_side`` and
    ``max_bytes``."""
    from PIL import Image as pil_image
    from PIL import UnidentifiedImageError

    size = len(raw)
    try:
        with warnings.catch_warnings():
            # Pillow warns (rather than fails) for large images; ours is a hard bound.
            warnings.simplefilter("error", pil_image.DecompressionBombWarning)
            with pil_image.open(io.BytesIO(raw), formats=list(FORMATS)) as image:
                return _prepare(image, name, size, raw, max_side=max_side,
                                max_bytes=max_bytes)
    except UnidentifiedImageError:
        raise ImageError(f"{name} is not a PNG, JPEG, WebP or GIF image (the format is "
                         "detected from the content, not the file name)") from None
    except (pil_image.DecompressionBombWarning, pil_image.DecompressionBombError):
        raise ImageError(f"{name} has too many pixels to read safely") from None
    except (OSError, SyntaxError, ValueError) as exc:  # truncated or corrupt data
        raise ImageError(f"cannot decode {name}: {exc}") from None


def _prepare(image: PILImage, name: str, size: int, raw: bytes, *, max_side: int,
             max_bytes: int) -> Prepared:
    fmt = image.format or "?"
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ImageError(f"{name} is {width}x{height} pixels, more than {MAX_PIXELS} in all")
    frames = getattr(image, "n_frames", 1)
    head = f"Image {name}: {fmt} {width}x{height} px, {size} bytes"
    if frames > 1:
        head += f", {frames} frames"
    if max(width, height) <= max_side and size <= max_bytes and frames == 1:
        image.load()  # a corrupt file fails here, not in the provider after the turn
        return Prepared(FORMATS[fmt], raw, f"{head}; sent as it is.")
    from PIL import ImageOps

    image.seek(0)
    frame = ImageOps.exif_transpose(image)
    media_type, data, (w, h) = _fit(frame, max_side=max_side, max_bytes=max_bytes, name=name)
    kind = media_type.split("/")[1].upper()
    note = " (first frame only)" if frames > 1 else ""
    return Prepared(media_type, data,
                    f"{head}; sent as {kind} {w}x{h} px, {len(data)} bytes{note}.")


def _fit(image: PILImage, *, max_side: int, max_bytes: int,
         name: str) -> tuple[str, bytes, tuple[int, int]]:
    """Scale ``image`` to ``max_side`` and encode it within ``max_bytes``."""
    from PIL import Image as pil_image

    alpha = image.mode in ("RGBA", "LA", "PA") or (image.mode == "P"
                                                    and "transparency" in image.info)
    image = image.convert("RGBA" if alpha else "RGB")
    side = max_side
    while True:
        scaled = image.copy()
        scaled.thumbnail((side, side), pil_image.Resampling.LANCZOS)
        attempts: list[tuple[str, dict[str, bool | int]]] = (
            [("PNG", {"optimize": True})] if alpha else [])
        attempts += [("JPEG", {"quality": q}) for q in JPEG_QUALITIES]
        for fmt, options in attempts:
            picture = scaled if fmt == "PNG" else _flatten(scaled)
            buffer = io.BytesIO()
            picture.save(buffer, fmt, **options)
            if buffer.tell() <= max_bytes:
                return FORMATS[fmt], buffer.getvalue(), scaled.size
        if max(scaled.size) <= MIN_SIDE:
            raise ImageError(f"{name} cannot be made smaller than {max_bytes} bytes")
        side = max(MIN_SIDE, int(max(scaled.size) * SHRINK))


def _flatten(image: PILImage) -> PILImage:
    """``image`` without transparency (on white), as JPEG needs."""
    if image.mode != "RGBA":
        return image
    from PIL import Image as pil_image

    background = pil_image.new("RGB", image.size, (255, 255, 255))
    background.paste(image, mask=image.getchannel("A"))
    return background


class ReadImage:
    """Shows the model an image file from the working directory."""

    name = "read_image"
    description = (
        "Look at an image file (PNG, JPEG, WebP or GIF) in the working directory. Large "
        "images are scaled down before you see them. Works only when the model route "
        "accepts images."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "file_path": {"type": "string",
                          "description": "Path of the image, relative to the working "
                                         "directory."},
        },
        "required": ["file_path"],
        "additionalProperties": False,
    }
    mutating = False
    path_arguments = ("file_path",)

    def __init__(self, plugin: ImageTools) -> None:
        self._plugin = plugin

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        """Check the route, the path and the file, then send the (fitted) image."""
        if not ctx.images_supported:
            return ToolResult("read_image cannot show images here: this session's model "
                              "route does not accept image content (a route that does sets "
                              "supports_images: true in its provider row)", is_error=True)
        config, path = self._plugin.config, args["file_path"]
        try:
            target = confine.of(ctx).target(ctx.cwd, path)
            raw = await asyncio.to_thread(_read_bytes, target, config["max_file_bytes"])
        except IsADirectoryError:
            return ToolResult(f"{path} is a directory, not an image", is_error=True)
        except FileNotFoundError:
            return ToolResult(f"no such file: {path}", is_error=True)
        except (confine.PathError, safeopen.BeneathError, OSError) as exc:
            return ToolResult(confine.refusal_text(path, exc, "read"), is_error=True)
        if raw is None:
            return ToolResult(f"{path} is larger than {config['max_file_bytes']} bytes "
                              "(config max_file_bytes); not read", is_error=True)
        try:
            prepared = await asyncio.to_thread(
                prepare, raw, confine.shown(ctx.cwd, target.real),
                max_side=config["max_side"], max_bytes=config["max_bytes"])
        except ImageError as exc:
            return ToolResult(str(exc), is_error=True)
        encoded = base64.b64encode(prepared.data).decode("ascii")
        return ToolResult(prepared.summary, images=(Image(prepared.media_type, encoded),))


def _read_bytes(target: confine.Target, limit: int) -> bytes | None:
    """The regular file's bytes, or None when it is larger than ``limit`` (not read)."""
    fd = safeopen.open_regular(target.anchor, target.rel)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            return None
        raw = f.read(limit + 1)
    return None if len(raw) > limit else raw


class ImageTools(Plugin):
    """Plugin row ``tools-image``: registers :class:`ReadImage`."""

    manifest = Manifest(
        id="tools-image",
        version=__version__,
        capabilities=frozenset({Capability.TOOL}),
        description="read_image: a PNG, JPEG, WebP or GIF from the working directory, "
                    "scaled down when large, sent to models that take images.",
        config_schema={
            "type": "object",
            "properties": {
                "max_side": {"type": "integer", "minimum": MIN_SIDE, "default": 1568,
                             "description": "Longest side, in pixels, of an image sent."},
                "max_bytes": {"type": "integer", "minimum": 1024, "default": 3_750_000,
                              "description": "Most bytes of one image sent (before "
                                             "base64)."},
                "max_file_bytes": {"type": "integer", "minimum": 1, "default": 50_000_000,
                                   "description": "Larger files are refused unread."},
            },
            "additionalProperties": False,
        },
    )

    def apply(self, reg: Registrar) -> None:
        """Register the tool; it reads this row's current config on every call."""
        reg.tool(ReadImage(self))

    async def update(self, config: Mapping[str, Any]) -> bool:
        """New bounds apply to the next call."""
        self.config = config
        return True
