"""Images in and out: PNG / TIFF / JPEG / WebP files, camera RAW through LibRaw, metadata, and the
bundled sample chart."""
