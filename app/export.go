package app

import (
	"context"

	"github.com/parleychat/parley"
)

// CreateExport creates p's export job, or replays it for the same key (or
// answers a live, current artifact of the same scope), and
// wakes the export workers for a new one.
func (s *Service) CreateExport(ctx context.Context, p parley.Principal, req parley.ExportRequest) (parley.ExportJob, error) {
	job, err := s.store.CreateExport(ctx, p, req)
	if err == nil && !job.Replayed {
		s.kick()
	}
	return job, err
}

// Export returns p's export job id: parley.ErrExportNotFound for a job that
// is missing or another user's, so nobody learns which ids exist.
func (s *Service) Export(ctx context.Context, p parley.Principal, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	job, err := s.store.ExportJob(ctx, id)
	if err == nil && job.User != p.User {
		err = parley.ErrExportNotFound
	}
	if parley.ErrorCode(err) == parley.CodeNotFound {
		err = parley.ErrExportNotFound
	}
	return job, err
}

// RevokeExport revokes job id, for operators: its downloads are refused
// from then on and a worker running it stops.
func (s *Service) RevokeExport(ctx context.Context, id string) (parley.ExportJob, error) {
	if err := parley.CheckExportID(id); err != nil {
		return parley.ExportJob{}, err
	}
	return s.store.RevokeExport(ctx, id)
}
