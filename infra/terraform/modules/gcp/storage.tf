# The data bucket (graphs, rendered files, state incl. debounce, published Slurm files) and a
# separate bucket for the function sources, which the functions' accounts cannot write.

resource "google_storage_bucket" "data" {
  #checkov:skip=CKV_GCP_62:Access logs need a log bucket the caller owns; Data Access audit logs cover reads and writes.
  project                     = var.project_id
  name                        = local.bucket_name
  location                    = local.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.bucket_force_destroy
  labels                      = local.common_labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_version_days
    }
    action {
      type = "Delete"
    }
  }

  # generation_retention_days: each generation's graph and rendered files are deleted that many days
  # after they were written (the prefixes end in "0": the latest.json pointers never match); the
  # version left behind goes by the rule above
  dynamic "lifecycle_rule" {
    for_each = var.generation_retention_days == null ? [] : [var.generation_retention_days]
    content {
      condition {
        age            = lifecycle_rule.value
        with_state     = "LIVE"
        matches_prefix = ["${local.key_base}/graphs/0", "${local.key_base}/rendered/0"]
      }
      action {
        type = "Delete"
      }
    }
  }

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }
}

resource "google_storage_bucket" "sources" {
  #checkov:skip=CKV_GCP_62:Access logs need a log bucket the caller owns; only Terraform and Cloud Build read this bucket.
  project                     = var.project_id
  name                        = "${local.bucket_name}-src"
  location                    = local.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.bucket_force_destroy
  labels                      = local.common_labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_version_days
    }
    action {
      type = "Delete"
    }
  }

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }
}

# The object name carries the zip's hash, so a changed package is a new object and a new build.
resource "google_storage_bucket_object" "source" {
  for_each = local.functions

  bucket = google_storage_bucket.sources.name
  name   = "${var.prefix}/${var.cluster}/${each.key}-${filemd5(var.function_packages[each.key])}.zip"
  source = var.function_packages[each.key]
}
