output "bucket_name" {
  description = "Bucket with graphs and rendered files."
  value       = module.topocast.bucket_name
}

output "function_names" {
  description = "Lambda functions by stage."
  value       = module.topocast.function_names
}

output "queue_urls" {
  description = "Queues between the stages."
  value       = module.topocast.queue_urls
}

output "ssm_path" {
  description = "Where the Slurm files are published."
  value       = module.topocast.ssm_path
}

output "pull_agent_policy_arn" {
  description = "Attach to the Slurm head node's instance role."
  value       = module.topocast.pull_agent_policy_arn
}
